"""The replay calibrated to the steady steps outside its window (gpudoctor.replay.calibration), on
synthetic timelines and steps of known answer (tests/replay/timelines.py)."""

from __future__ import annotations

import pytest
from timelines import Gpu, Host, trace

from gpudoctor.collectors.trace import trace_events
from gpudoctor.metrics import UnprofiledSteps
from gpudoctor.replay import replay_trace
from gpudoctor.replay.scenarios import gain

MS = 1000.0


def replay(data: dict, steps: int, unprofiled: UnprofiledSteps | None, source: str | None = None):
    summary = replay_trace(trace_events(data), steps, unprofiled, source=source)
    assert summary is not None and summary.error is None
    return summary


def steps_of(*runs: tuple[int, float, float]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(durations, waits) in us of runs of identical steps: (count, duration ms, wait ms) each."""
    durations = tuple(d * MS for n, d, _ in runs for _ in range(n))
    waits = tuple(w * MS for n, _, w in runs for _ in range(n))
    return durations, waits


def unprofiled(source: str, *runs: tuple[int, float, float], loader: bool = True) -> UnprofiledSteps:
    durations, waits = steps_of(*runs)
    return UnprofiledSteps(step_us=sum(durations) / len(durations),
                           wait_us=sum(waits) / len(waits) if loader else None,
                           source=source, durations_us=durations, waits_us=waits)


def loader_window(steps: int = 10) -> dict:
    """Each batch: 2 ms waiting for it, a 1 ms kernel waited for, then 3 ms of Python: a 6 ms step,
    4 ms of it on the host, as traced (no tracing overhead here)."""
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(steps):
        host.data_wait(2 * MS)
        host.launch(1 * MS)
        host.sync()
        host.python(3 * MS)
    return trace(host)


def test_steps_the_window_does_not_hold_are_added_unchanged_to_every_what_if():
    """150 steps like the window's (5.9 ms, 2 ms of it waiting) and 10 that also save a checkpoint
    (48 ms more on the host): the mean step is 8.9 ms, 3 ms of it work the window never saw."""
    data = loader_window()
    steady = unprofiled("loader", (15, 5.9, 2.0), (1, 53.9, 2.0), (15, 5.9, 2.0), (1, 53.9, 2.0),
                        (120, 5.9, 2.0), (8, 53.9, 2.0))
    summary = replay(data, 10, steady, source="loader")
    assert summary.run_steps == 10
    assert summary.unrepresented_us == pytest.approx(10 * 3.0 * MS, rel=1e-6)
    assert summary.unrepresented_wait_us == pytest.approx(0.0, abs=1e-6)
    assert summary.unrepresented_steps == 10  # the steps that held it (the batch model asks if one an epoch)
    assert "10 of 160 steady steps outside the window spent longer on the host" in summary.calibration
    assert "3 ms per step" in summary.calibration and "added unchanged to every what-if" in summary.calibration
    # the calibration's targets are the represented steps: 5.9 ms, 2 ms of it waiting (as traced: no scaling)
    assert summary.data_scale == pytest.approx(1.0, rel=1e-3) and summary.host_scale == 1.0
    assert summary.baseline_span_us == pytest.approx(summary.measured_span_us, rel=1e-3)
    data_row = next(s for s in summary.scenarios if s.name == "data")
    # without its ten 2 ms waits the window is 20 ms shorter; the 3 ms a step it does not hold stay
    assert data_row.span_us == pytest.approx(summary.baseline_span_us - 20 * MS, rel=1e-3)
    window_only = summary.baseline_span_us / data_row.span_us
    assert gain(summary, "data") == pytest.approx(
        (summary.baseline_span_us + 30 * MS) / (data_row.span_us + 30 * MS), rel=1e-9)
    assert gain(summary, "data") < window_only - 0.1


def test_steps_within_the_windows_longest_are_all_represented():
    """Unprofiled steps that vary, none longer on the host than the window's longest: nothing added."""
    steady = unprofiled("loader", (80, 5.5, 2.0), (80, 6.0, 2.0))
    summary = replay(loader_window(), 10, steady, source="loader")
    assert summary.unrepresented_us == 0.0 and "steady steps outside" not in summary.calibration
    data_row = next(s for s in summary.scenarios if s.name == "data")
    assert gain(summary, "data") == pytest.approx(summary.baseline_span_us / data_row.span_us, rel=1e-12)


def test_the_waits_of_the_steps_it_does_not_hold_are_not_the_windows_to_scale():
    """Each epoch's first batch waits 40 ms for workers started again, in a step that also saves the
    epoch's images (20 ms on the host): neither is the loop's rhythm. The window's waits are scaled to
    the represented steps' 2 ms, not to the mean that holds the epoch starts."""
    steady = unprofiled("loader", *[(15, 5.9, 2.0), (1, 63.9, 40.0)] * 10)
    summary = replay(loader_window(), 10, steady, source="loader")
    assert summary.data_scale == pytest.approx(1.0, rel=1e-3)
    # per step: the mean 9.525 ms less the represented 5.9 ms, 2.375 ms of it waits (4.375 - 2)
    assert summary.unrepresented_us == pytest.approx(10 * 3.625 * MS, rel=1e-6)
    assert summary.unrepresented_wait_us == pytest.approx(10 * 2.375 * MS, rel=1e-6)


def gan_window(batches: int = 10) -> dict:
    """A GAN's loop: per batch a 2 ms wait, then two optimizer steps (the discriminator's, the
    generator's), each 4 ms of traced host work around a 0.1 ms kernel."""
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(batches):
        host.data_wait(2 * MS)
        for _ in range(2):
            start = host.t
            host.launch(100.0)
            host.python(4 * MS - (host.t - start))
            host._x("user_annotation", "Optimizer.step#Adam.step", start, host.t - start)
    return trace(host)


def test_a_window_of_optimizer_steps_is_calibrated_in_the_runs_batches():
    """The window counted 20 optimizer steps; the run counts batches (two optimizer steps each), of
    6 ms, 2 ms of them waiting: the traced host's 8 ms a batch is twice the run's 4 ms."""
    steady = unprofiled("loader", (100, 6.0, 2.0))
    summary = replay(gan_window(), 20, steady, source="optimizer")
    assert summary.run_steps == 10  # the DataLoader batches the window fetched
    assert "DataLoader batches: 10 in the window, which counted 20 optimizer steps" in summary.calibration
    assert "tracing slowed the host" in summary.calibration
    assert summary.host_scale == pytest.approx(0.5, rel=0.02)  # 10 batches x 4 ms against 80 ms as traced


def test_a_window_of_another_source_whose_trace_marks_none_of_the_runs_steps_is_not_calibrated():
    steady = unprofiled("optimizer", (100, 6.0, 0.0), loader=False)
    summary = replay(loader_window(), 10, steady, source="forward")
    assert summary.host_scale == 1.0 and summary.run_steps == 0
    assert summary.calibration.startswith("not calibrated: the window counted module forwards, the run "
                                          "optimizer steps")


def test_long_steps_of_a_host_that_ran_ahead_paid_for_the_queue_the_replay_already_holds():
    """The host queues a 5 ms kernel in 1 ms a step and blocks once every 10 steps for the queue:
    steps of 1 ms and one of 50 ms, a mean of 5.9 ms. A step the window stands for takes at least the
    GPU's 5 ms: only 0.9 ms a step is work it does not hold."""
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(10):
        start = host.t
        host.launch(5 * MS)
        host.python(1 * MS - (host.t - start))
        host._x("user_annotation", "Optimizer.step#SGD.step", start, host.t - start)
    host.sync()
    steady = unprofiled("optimizer", *[(9, 1.0, 0.0), (1, 50.0, 0.0)] * 10, loader=False)
    summary = replay(trace(host), 10, steady, source="optimizer")
    assert summary.unrepresented_us == pytest.approx(10 * 0.9 * MS, rel=0.02)
    assert "beyond the GPU's work per step" in summary.calibration


def test_without_the_steps_one_by_one_every_step_counts_as_represented():
    summary = replay(loader_window(), 10, UnprofiledSteps(step_us=8.9 * MS, wait_us=2 * MS))
    assert summary.unrepresented_us == 0.0 and summary.run_steps == 10
