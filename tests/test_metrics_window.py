"""Steady-state samples around a profiler window: the window's stop holds the loop until its next step."""

from __future__ import annotations

import pytest
from helpers import make_cpu_samples, make_gpu_samples, make_loader, make_session, make_steps

from gpudoctor import metrics
from gpudoctor.analysis.worker_gain import loop_cpu_per_batch
from gpudoctor.session import ProfileSummary


def _stalled_session(**cpu_fields):
    """20 steps of 0.5 s, a profiler window from 10 to 12 s, then no step until 40 s (the profiler's stop
    collecting and exporting a big trace: 26 s on an H200 for a ResNet-50 fed by num_workers=0), then 20
    steps more. The GPU is 80% busy while steps run and idle during the stop; CPU samples likewise."""
    steps = make_steps(20, 0.5) + make_steps(20, 0.5, start_t=40.0)
    busy = [s for s in make_gpu_samples(200, util_percent=80.0) if s.t <= 10.0 or s.t >= 40.0]
    stalled = [s for s in make_gpu_samples(200, util_percent=0.0) if 12.0 < s.t < 40.0]
    cpu = [s for s in make_cpu_samples(200, **cpu_fields) if s.t <= 10.0 or s.t >= 40.0]
    cpu += [s for s in make_cpu_samples(200, main_percent=100.0, main_thread_percent=100.0) if 12.0 < s.t < 40.0]
    profile = ProfileSummary(steps=4, window_s=2.0, window_start_s=10.0, window_end_s=12.0)
    return make_session(steps=steps, gpu_samples=sorted(busy + stalled, key=lambda s: s.t),
                        cpu_samples=sorted(cpu, key=lambda s: s.t), profile=profile, step_source="optimizer")


def test_the_profilers_stop_is_not_steady_state():
    session = _stalled_session(main_percent=1400.0, main_thread_percent=100.0)
    steady = metrics.gpu_samples_steady(session)
    assert steady and all(not 10.0 <= s.t <= 40.0 for s in steady)
    assert metrics.gpu_metric_mean(steady, "util_percent") == 80.0  # not diluted by 28 s of the stop
    assert all(s.main_percent == 1400.0 for s in metrics.cpu_samples_steady(session))


def test_a_main_process_loaders_loop_cpu_is_its_main_threads_less_the_fetch():
    """num_workers=0: torch's intra-op threads helped build each batch (1400% for the process, 100% for its
    main thread); their CPU goes with the batch to the workers, not with the loop. At 2 steps/s, 0.5 core-s
    of main thread per batch, of which the fetch (measured on the main thread) took 0.4: the loop keeps 0.1."""
    session = _stalled_session(main_percent=1400.0, main_thread_percent=100.0)
    session.torch_cuda_used = True
    loader = make_loader(num_workers=0, batches=40, fetch_s_per_batch=0.4, fetch_cpu_ratio=1.0)
    assert loop_cpu_per_batch(session, loader, per_step=1) == pytest.approx(0.5 - 0.4)
    with_workers = make_loader(num_workers=2, batches=40)
    assert loop_cpu_per_batch(session, with_workers, per_step=1) == 7.0  # the whole process's, as before
    # a CPU run: the intra-op threads compute the model, the loop's own work; the whole process counts
    session.torch_cuda_used = False
    assert loop_cpu_per_batch(session, loader, per_step=1) == pytest.approx(7.0 - 0.4)
