"""What producing batches elsewhere buys, on synthetic runs of known answer (analysis/worker_gain.py)."""

from __future__ import annotations

import pytest
from helpers import make_cpu_samples, make_gpu_samples, make_loader, make_session, make_steps

from gpudoctor.checks import gd101_workers, gd102_input_stall
from gpudoctor.session import ProfileSummary, ReplayScenario, ReplaySummary


def _replay(data_gain: float, gpu_busy_share: float) -> ProfileSummary:
    """A replayed window of 10 steps of 100 ms whose data scenario says `data_gain`."""
    span = 1_000_000.0
    return ProfileSummary(steps=10, kernel_count=100, gpu_busy_us=gpu_busy_share * span,
                          replay=ReplaySummary(steps=10, baseline_span_us=span,
                                               baseline_gpu_busy_us=gpu_busy_share * span,
                                               calibration="calibrated",
                                               scenarios=[ReplayScenario(name="data", label="instant",
                                                                         span_us=span / data_gain)]))


def _in_process_run(*, util: float, replay: ProfileSummary | None):
    """imagenet --dummy -j 0: every batch made in the main process (85 ms of a 100 ms step)."""
    return make_session(steps=make_steps(60, 0.100, 0.085),
                        loaders=[make_loader(num_workers=0, batches=60, fetch_s_per_batch=0.085)],
                        gpu_samples=make_gpu_samples(40, util_percent=util, interval_s=0.15),
                        usable_cores=16, torch_cuda_used=True, profile=replay)


def test_in_process_batches_are_host_work_in_series_with_the_step():
    """The replay found the wait hidden (1.0x) while the GPU was 5% busy: the series model decides,
    step 100 ms -> 15 ms of other host work (the GPU's 5 ms fits inside)."""
    session = _in_process_run(util=5.0, replay=_replay(data_gain=1.0, gpu_busy_share=0.05))
    (stall,) = gd102_input_stall.run(session)
    assert stall.severity == "critical"
    assert stall.prediction is not None and stall.prediction.gain == pytest.approx(100 / 15, rel=1e-3)
    assert "in series with the step" in stall.prediction.detail and "the replay said 1.00x" in stall.prediction.detail


def test_in_process_batches_behind_a_busy_gpu_stay_hidden():
    """The same loop with the GPU 95% busy: producing the batch overlapped queued GPU work."""
    session = _in_process_run(util=95.0, replay=_replay(data_gain=1.0, gpu_busy_share=0.95))
    (stall,) = gd102_input_stall.run(session)
    assert stall.prediction is not None and stall.prediction.gain < 1.06


def _worker_run(*, workers_now: int, main_percent: float, cores: int = 16):
    """2 workers, 80 ms a batch each, 10 ms of loop per step: the loop waits 30 ms a step."""
    return make_session(steps=make_steps(60, 0.040, 0.030),
                        loaders=[make_loader(num_workers=workers_now, batches=60, fetch_s_per_batch=0.080)],
                        gpu_samples=make_gpu_samples(40, util_percent=20.0, interval_s=0.06),
                        cpu_samples=make_cpu_samples(40, interval_s=0.06, main_percent=main_percent,
                                                     tree_percent=main_percent + 200.0),
                        usable_cores=cores, torch_cuda_used=True)


def test_more_workers_pay_the_hand_off_and_share_the_cores_with_the_loop():
    """F = 80 ms over 2 workers; 16 cores. A loop using 25% of a core at 25 steps/s uses 10 ms
    of CPU a batch: at the predicted step rate it needs more than a core of its own."""
    (light,) = gd101_workers.run(_worker_run(workers_now=2, main_percent=25.0))
    assert light.prediction is not None
    # 10 ms loop + 0.9 ms hand-off + max(0, 80 / 14 - 10.9): 10.9 ms a step against 40 ms
    assert light.estimated_gain == pytest.approx(40 / 10.9, rel=0.02)
    (heavy,) = gd101_workers.run(_worker_run(workers_now=2, main_percent=300.0))
    # the loop uses 120 ms of CPU per batch (its own threads): at t a batch it takes 0.12 / t cores and
    # leaves the rest to the workers, who then make a batch in 80 ms / (16 - 0.12 / t); both agree at
    # t = 0.2 / 16 = 12.5 ms: fewer batches made in parallel, a smaller gain (40 / 12.5 = 3.2x)
    assert heavy.prediction is not None and heavy.estimated_gain == pytest.approx(3.2, rel=0.01)
    assert "workers the cores carry" in heavy.prediction.detail


def test_one_number_for_the_workers_on_both_findings():
    from gpudoctor.verdict.engine import run_checks

    session = _worker_run(workers_now=2, main_percent=25.0)
    result = run_checks(session, [gd101_workers.run.check, gd102_input_stall.run.check])
    gains = {f.id: f.estimated_gain for f in result.findings}
    assert gains["GD101"] == gains["GD102"]
    stall = next(f for f in result.findings if f.id == "GD102")
    assert "cross-check" in stall.message and "if batches arrived instantly" in stall.message


def _apart_profile(span: float) -> ProfileSummary:
    """A window of 10 replayed batches over SPAN us, 100 ms of them time the window's steps do not hold
    (ReplaySummary.unrepresented_us), and 100 ms if batches arrived instantly."""
    return ProfileSummary(steps=10, kernel_count=100, gpu_busy_us=0.05 * span,
                          replay=ReplaySummary(steps=10, run_steps=10, baseline_span_us=span,
                                               baseline_gpu_busy_us=0.05 * span, calibration="calibrated",
                                               unrepresented_us=100_000.0,
                                               scenarios=[ReplayScenario(name="data", label="instant",
                                                                         span_us=100_000.0)]))


def test_time_the_window_does_not_hold_is_not_the_workers_to_hide():
    """10 ms of each 40 ms step is an epoch's end and start, which the window's steps do not hold
    (ReplaySummary.unrepresented_us); the rest is 10 ms of loop and 20 ms of waiting for 2 workers
    at 80 ms a batch. With 3 workers (4 cores) a batch comes every 26.7 ms: the loop's 10.9 ms
    (hand-off included) cannot hide it, and the 10 ms apart comes on top: 36.7 ms, not 26.7 ms."""
    profile = _apart_profile(300_000.0)  # 10 batches of 30 ms replayed; 10 ms a batch apart
    session = make_session(steps=make_steps(60, 0.040, 0.020),
                           loaders=[make_loader(num_workers=2, batches=60, fetch_s_per_batch=0.080)],
                           gpu_samples=make_gpu_samples(40, util_percent=5.0, interval_s=0.06),
                           cpu_samples=make_cpu_samples(40, interval_s=0.06, main_percent=25.0,
                                                        tree_percent=225.0),
                           usable_cores=4, torch_cuda_used=True, profile=profile)
    (stall,) = gd102_input_stall.run(session)
    assert stall.prediction is not None and stall.prediction.gain == pytest.approx(400 / 200)  # (300+100)/(100+100)
    (workers,) = gd101_workers.run(session)
    assert workers.prediction is not None and "the window's steps do not hold" in workers.prediction.detail
    assert workers.prediction.label == "with num_workers=3"
    # per batch: 10 ms + 0.9 ms hand-off + a wait to 80 / 3 ms, then the 10 ms apart
    assert workers.estimated_gain == pytest.approx(40 / (80 / 3 + 10), rel=0.02)


def _epochs_run(*, persistent: bool, iterators: int, iterators_s: float, workers_now: int = 2):
    """dcgan-like: 16-batch epochs (8 iterators over 128 batches), 10 ms of loop a step, 2 workers at 40 ms a
    batch: each batch comes every 20 ms, so the loop waits 10 ms. The window's steps hold it all (no time apart)."""
    loader = make_loader(num_workers=workers_now, batches=128, fetch_s_per_batch=0.040, persistent_workers=persistent,
                         iterators=iterators, iterators_s=iterators_s, batch_size=64, dataset_len=1000)
    return make_session(steps=make_steps(128, 0.020, 0.010), loaders=[loader],
                        gpu_samples=make_gpu_samples(40, util_percent=20.0, interval_s=0.06),
                        cpu_samples=make_cpu_samples(40, interval_s=0.06, main_percent=25.0, tree_percent=225.0),
                        usable_cores=16, torch_cuda_used=True)


def test_workers_that_start_again_each_epoch_pay_their_start_up_per_epoch():
    """8 iterators, 2 workers started in 0.32 s: 20 ms a worker. 5 workers (ceil(40 / 10 x 1.2)) start 3
    more at each of the 7 epochs after the first: 7 x 3 x 20 ms over 128 batches = 3.28 ms a batch on
    top of 10 ms of loop and 0.9 ms of hand-off: 20 / 14.18 ms, not 20 / 10.9 ms."""
    (workers,) = gd101_workers.run(_epochs_run(persistent=False, iterators=8, iterators_s=0.32))
    assert workers.prediction is not None and workers.prediction.label == "with num_workers=5"
    assert workers.estimated_gain == pytest.approx(20 / (10 + 0.9 + 7 * 3 * 20 / 128), rel=0.01)
    assert "starting the workers again each epoch" in workers.prediction.detail


def test_persistent_workers_start_once():
    """The same run with persistent_workers=True: one iterator, started before the steady steps."""
    (workers,) = gd101_workers.run(_epochs_run(persistent=True, iterators=1, iterators_s=0.04))
    assert workers.estimated_gain == pytest.approx(20 / 10.9, rel=0.01)
    assert "starting the workers again" not in (workers.prediction.detail if workers.prediction else "")


def test_restarts_without_workers_now_use_the_host_default_and_the_first_batch():
    """num_workers=0, 1000 items in batches of 64 (16 a epoch), 128 batches: 8 epochs counted from the
    dataset's length (no iterator timing). 4 workers each epoch after the first: 7 x (4 x WORKER_START_S
    + the first batch, F = 40 ms, now a wait) over 128 batches."""
    from gpudoctor.analysis.input_pipeline import WORKER_START_S
    from gpudoctor.analysis.worker_gain import iterators_created, restart_per_batch

    loader = make_loader(num_workers=0, batches=128, fetch_s_per_batch=0.040, batch_size=64, dataset_len=1000)
    assert iterators_created(loader) == 8
    assert restart_per_batch(loader, 4, 0.040) == pytest.approx(7 * (4 * WORKER_START_S + 0.040) / 128)
    loader.persistent_workers = True
    assert restart_per_batch(loader, 4, 0.040) == 0.0


def test_workers_keep_pace_with_the_steps_not_with_the_time_apart():
    """A 40 ms step = 10 ms of loop + 20 ms of data wait + 10 ms a step of an epoch's end and start the
    window's steps do not hold: C is the 10 ms of loop, so 2 workers at 40 ms a batch (20 ms a batch) are
    too few and ceil(40 / 10 x 1.2) = 5 are needed, not ceil(40 / 20 x 1.2) = 3."""
    from gpudoctor.analysis.input_pipeline import input_stall, worker_plan

    profile = _apart_profile(200_000.0)  # 10 batches of 20 ms replayed; 10 ms a batch apart
    session = make_session(steps=make_steps(60, 0.040, 0.020),
                           loaders=[make_loader(num_workers=2, batches=60, fetch_s_per_batch=0.040)],
                           gpu_samples=make_gpu_samples(40, util_percent=5.0, interval_s=0.06),
                           usable_cores=16, torch_cuda_used=True, profile=profile)
    found = input_stall(session)
    assert found is not None and found.loader is not None
    plan = worker_plan(session, found.loader, found)
    assert plan.compute_s == pytest.approx(0.010) and plan.needed == 5 and plan.recommended == 5
