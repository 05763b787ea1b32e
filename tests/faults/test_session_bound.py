"""Session files stay bounded for long runs (README, "Overhead and safety").

A 1-hour run at the default 0.5 s interval, with everything a Session can grow by at
its cap (CPU samples on 16 cores, NVML samples of one GPU, step records, uncaught
exceptions), serialises as `gpudoctor` writes it to at most BOUND_1H bytes; a 3-hour
run is thinned to the same size.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from gpudoctor.collectors.cpu import MAX_SAMPLES, CpuSampler, merge_samples
from gpudoctor.collectors.events import ERRORS_MAX, STEP_RECORDS_MAX, EventReader
from gpudoctor.collectors.nvml import NvmlSampler
from gpudoctor.session import CpuSample, ProcessInfo, Session

BOUND_1H = 8 << 20  # bytes, 16 usable cores and 1 GPU (README states it)
INTERVAL_S = 0.5
CORES = 16

_spec = importlib.util.spec_from_file_location(
    "fake_pynvml", Path(__file__).resolve().parent.parent / "collectors" / "fake_pynvml.py")
assert _spec is not None and _spec.loader is not None
fake_pynvml = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("fake_pynvml", fake_pynvml)
_spec.loader.exec_module(fake_pynvml)


def cpu_sample(t: float, n: int) -> CpuSample:
    return CpuSample(
        t=round(t, 3),
        system_percent=40.0 + n % 50,
        per_core_percent=[float((n + i) % 100) + 0.1 for i in range(CORES)],
        tree_percent=312.4,
        main_percent=99.1,
        main_thread_percent=98.7,
        workers_percent=210.3,
        tree_rss_bytes=(10 << 30) + n,
        iowait_percent=1.2,
    )


def cpu_samples_for(seconds: float) -> tuple[list[CpuSample], float]:
    sampler = CpuSampler(root_pid=1, t0=0.0, interval_s=INTERVAL_S)
    for n in range(int(seconds / INTERVAL_S)):
        sampler.keep(cpu_sample((n + 1) * INTERVAL_S, n))
    return sampler.stop(), sampler.effective_interval_s


def gpu_result_for(seconds: float):
    clock = fake_pynvml.FakeClock()
    nv = fake_pynvml.FakeNvml([fake_pynvml.FakeGpu("GPU-00000000-aaaa-bbbb-cccc-000000000000")], clock=clock)
    sampler = NvmlSampler(interval_s=INTERVAL_S, nvml=nv, clock=clock, environ={})
    sampler.start(background=False)
    for _ in range(int(seconds / INTERVAL_S)):
        clock.advance(INTERVAL_S)
        sampler.poll()
    return sampler.stop()


def events_for(tmp_path: Path, seconds: float, steps_per_s: float = 20.0) -> EventReader:
    """What one training process's agent writes in `seconds`: 2000 step events, then an
    aggregate per flush (0.2 s); plus far more uncaught exceptions than are kept."""
    t0 = 1_000_000.0
    lines = [{"k": "hello", "ts": t0, "pid": 4242, "ppid": 1}]
    total = int(seconds * steps_per_s)
    for n in range(1, min(total, 2000) + 1):
        lines.append({"k": "step", "ts": t0 + n / steps_per_s, "src": "optimizer", "n": n, "dur": 0.05, "wait": 0.01})
    flush_steps = int(0.2 * steps_per_s)
    for n in range(2000, total, flush_steps):
        lines.append({"k": "steps_agg", "ts": t0 + n / steps_per_s, "src": "optimizer", "n": flush_steps,
                      "dur": 0.05 * flush_steps, "wait": 0.01 * flush_steps, "total": n})
    for n in range(5 * ERRORS_MAX):  # e.g. a thread pool whose tasks keep dying
        lines.append({"k": "exception", "ts": t0 + n, "type": "ValueError", "message": "m" * 2000,
                      "traceback": "t" * 8000, "thread": "worker"})
    (tmp_path / "events-4242.jsonl").write_text("\n".join(json.dumps(e) for e in lines) + "\n")
    reader = EventReader(tmp_path, t0)
    reader.poll()
    return reader


def long_run(tmp_path: Path, seconds: float) -> Session:
    session = Session(duration_s=seconds, exit_code=0, stop_reason="exited", command=["python", "train.py"])
    reader = events_for(tmp_path, seconds)
    reader.apply(session)
    session.cpu_samples, session.cpu_sample_interval_s = cpu_samples_for(seconds)
    from gpudoctor.run.gpu_monitor import GpuMonitor

    GpuMonitor.apply(gpu_result_for(seconds), session)
    # DataLoader workers re-created every epoch (no persistent_workers): one entry each
    session.processes += [ProcessInfo(pid=100_000 + n, ppid=4242, role="worker") for n in range(8 * 360)]
    return session


def written_size(data: dict) -> int:
    return len(json.dumps(data, separators=(",", ":"), allow_nan=False).encode())  # as gpudoctor writes it


@pytest.mark.parametrize("hours", [1, 2])
def test_session_of_a_long_run_is_bounded(tmp_path, hours, capsys):
    session = long_run(tmp_path, hours * 3600)
    data = session.to_dict()
    size = written_size(data)
    assert size <= BOUND_1H, f"{size / 2**20:.2f} MiB"
    assert len(session.cpu_samples) <= MAX_SAMPLES
    assert len(session.gpu_samples) <= 7200
    assert len(session.steps.records) <= STEP_RECORDS_MAX
    assert session.steps.count >= hours * 3600 * 20 - 5  # every step counted, aggregated or kept
    assert session.steps.last_step_t is not None and session.steps.last_step_t > hours * 3600 - 5
    assert len(session.errors) == ERRORS_MAX
    assert any("more uncaught exceptions were not kept" in n for n in session.notes)
    if hours == 1:
        session.save(tmp_path / "long.session.json")  # as gpudoctor writes it (indented) ...
        Session.load(tmp_path / "long.session.json")  # ... it loads back, well within the input limits
        parts = {name: written_size(value) for name, value in data.items()}
        with capsys.disabled():  # the numbers behind the README's bound (pytest -s shows them too)
            print(f"\n1-hour session: {size / 2**20:.2f} MiB;",
                  ", ".join(f"{k} {v / 2**20:.2f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:5]))


def test_cpu_samples_are_thinned_not_dropped():
    samples, interval = cpu_samples_for(3 * 3600)  # 21600 raw samples
    assert MAX_SAMPLES // 2 <= len(samples) <= MAX_SAMPLES
    assert interval == INTERVAL_S * 4  # each kept sample stands for 2 s
    times = [s.t for s in samples]
    assert times == sorted(times) and times[0] < 5 and times[-1] > 3 * 3600 - 5  # the whole run, start to end
    assert max(s.tree_rss_bytes or 0 for s in samples) == (10 << 30) + 21599  # the peak survives merging
    assert all(len(s.per_core_percent) == CORES for s in samples)


def test_merge_keeps_unknowns_unknown():
    a = CpuSample(t=1.0, system_percent=10.0, per_core_percent=[10.0, 20.0], main_percent=None, workers_percent=None)
    b = CpuSample(t=2.0, system_percent=30.0, per_core_percent=[30.0, 40.0], main_percent=50.0, workers_percent=None)
    m = merge_samples([a, b])
    assert (m.t, m.system_percent, m.per_core_percent, m.main_percent, m.workers_percent) == \
        (1.5, 20.0, [20.0, 30.0], 50.0, None)
