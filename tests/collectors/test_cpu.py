"""Usable cores (affinity and cgroup quota) and the process-tree sampler."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time

import pytest

from gpudoctor.collectors import cpu


def _fake_cgroup(tmp_path, files: dict[str, str]):
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_cgroup_v2_quota_takes_the_tightest_limit(tmp_path, monkeypatch):
    root = _fake_cgroup(tmp_path, {
        "job/cpu.max": "400000 100000\n",  # 4 cores for the job
        "job/step/cpu.max": "150000 100000\n",  # 1.5 cores for this step
    })
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/job/step\n")
    real_read = cpu.Path.read_text

    def read_text(self, *args, **kwargs):
        if str(self).endswith("/cgroup") and str(self).startswith("/proc/"):
            return proc.read_text()
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(cpu.Path, "read_text", read_text)
    assert cpu.cgroup_quota_cores(12345, root=root) == 1.5


def test_cgroup_unlimited_is_none(tmp_path, monkeypatch):
    root = _fake_cgroup(tmp_path, {"job/cpu.max": "max 100000\n"})
    real_read = cpu.Path.read_text

    def read_text(self, *args, **kwargs):
        if str(self).startswith("/proc/"):
            return "0::/job\n"
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(cpu.Path, "read_text", read_text)
    assert cpu.cgroup_quota_cores(12345, root=root) is None


def test_cpu_info_usable_cores_follow_affinity():
    info = cpu.cpu_info()
    assert info.logical_cores and info.logical_cores >= 1
    assert info.affinity_cores == len(os.sched_getaffinity(0))
    assert info.usable_cores <= info.affinity_cores


BUSY_CPU_S = 1.0
# The child burns BUSY_CPU_S of CPU time (not wall time) once told to start, then says so
# and idles: what it did is known exactly, however slow a loaded machine makes it.
_BUSY_CHILD = (
    "import sys, time\n"
    "sys.stdin.readline()\n"
    f"end = time.process_time() + {BUSY_CPU_S}\n"
    "while time.process_time() < end: pass\n"
    "print('done', flush=True)\n"
    "time.sleep(600)\n"
)


def _cpu_seconds(samples: list, field: str) -> float:
    """CPU time the samples account for: each percent times its interval (they telescope)."""
    total = 0.0
    for before, after in itertools.pairwise(samples):
        value = getattr(after, field)
        assert value is not None, field
        total += value / 100 * (after.t - before.t)
    return total


def _wait_for(predicate, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


@pytest.mark.integration
def test_sampler_accounts_for_the_cpu_time_a_child_and_its_main_thread_used():
    child = subprocess.Popen([sys.executable, "-c", _BUSY_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        sampler = cpu.CpuSampler(child.pid, time.time(), 0.2, main_pid=lambda: child.pid)
        sampler.start()
        _wait_for(lambda: len(sampler.samples) >= 1)  # a first sample before the work starts
        first = len(sampler.samples) - 1
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        done = len(sampler.samples)
        _wait_for(lambda: len(sampler.samples) >= done + 1)  # and one after it ended
        samples = sampler.stop()[first:]
    finally:
        child.kill()
        child.wait()
    assert len(samples) >= 2
    # rounding to 0.1% per sample and the child's own idle overhead stay far inside the margins
    assert BUSY_CPU_S * 0.9 <= _cpu_seconds(samples, "main_percent") <= BUSY_CPU_S * 1.3
    assert BUSY_CPU_S * 0.9 <= _cpu_seconds(samples, "main_thread_percent") <= BUSY_CPU_S * 1.3
