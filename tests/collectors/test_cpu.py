"""Usable cores (affinity and cgroup quota) and the process-tree sampler."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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


def test_sampler_sees_a_busy_child_and_its_main_thread():
    child = subprocess.Popen([sys.executable, "-c", "import time\nend=time.time()+3\nwhile time.time()<end: pass"])
    try:
        sampler = cpu.CpuSampler(child.pid, time.time(), 0.2, main_pid=lambda: child.pid)
        sampler.start()
        time.sleep(1.5)
        samples = sampler.stop()
    finally:
        child.kill()
        child.wait()
    assert len(samples) >= 3
    busy = [s for s in samples if s.main_percent is not None]
    assert busy and max(s.main_percent for s in busy) > 50  # a spinning loop uses most of a core
    assert any(s.main_thread_percent is not None and s.main_thread_percent > 50 for s in samples)
