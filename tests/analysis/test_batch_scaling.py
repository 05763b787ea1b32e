"""Samples/s at m times the batch (gpudoctor.analysis.batch_scaling) on synthetic steps of known answer."""

from __future__ import annotations

import pytest
from helpers import make_gpu_samples, make_loader, make_session, make_steps

from gpudoctor.analysis.batch_scaling import BatchScaling, batch_scaling
from gpudoctor.model import Prediction
from gpudoctor.session import ProfileSummary


def _model(**kw) -> BatchScaling:
    base = {"step_s": 0.010, "host_s": 0.010, "in_process_data_s": 0.0, "kernel_s": 0.001, "copy_s": 0.0,
            "fill": 0.1, "fill_measured": True, "sync_share": 0.0, "loader_s": None, "max_multiple": None,
            "sources": ()}
    return BatchScaling(**{**base, **kw})


def test_a_launch_bound_step_gains_the_whole_multiple_until_the_gpu_is_the_slower():
    # host 10 ms of launches and Python; kernels 1 ms filling a tenth of the SMs: K(m) = 1 ms * (1 + 0.1 (m - 1))
    model = _model()
    assert model.gain(16) == pytest.approx(16.0)  # K(16) = 2.5 ms, under the host's 10 ms
    # K(128) = 13.7 ms > 10 ms: the GPU sets the step, 128 * 10 / 13.7
    assert model.gain(128) == pytest.approx(128 * 10 / 13.7, rel=1e-6)
    assert model.limit(16).startswith("the host") and model.limit(128) == "the GPU's work"


def test_kernels_that_fill_the_sms_grow_with_the_batch():
    busy = _model(host_s=0.002, kernel_s=0.008, fill=1.0, step_s=0.010)
    # m = 4: the GPU 32 ms (host hidden under it): 4 * 10 / 32
    assert busy.gain(4) == pytest.approx(1.25)


def test_batches_made_in_the_loop_grow_with_it():
    # num_workers=0: 9 ms of the 10 ms step produce the batch; twice the batch, twice that
    model = _model(host_s=0.001, in_process_data_s=0.009)
    assert model.gain(2) == pytest.approx(2 * 10 / 19)


def test_workers_set_the_pace_when_they_are_the_slower():
    model = _model(loader_s=0.004)  # a batch every 4 ms; at 4x, 16 ms > the host's 10 ms
    assert model.gain(2) == pytest.approx(2.0)
    assert model.gain(4) == pytest.approx(4 * 10 / 16)
    assert model.limit(4) == "the DataLoader's workers"


def test_a_host_that_waits_for_the_gpu_adds_its_growth():
    # every idle gap followed a sync: the host waits out the GPU's extra 0.9 ms at 10x (K(10) = 1.9 ms)
    model = _model(sync_share=1.0)
    assert model.gain(10) == pytest.approx(10 * 10 / 10.9)


def test_the_curve_stops_at_the_memory_bound_and_the_knee_where_doubling_buys_under_5_percent():
    model = _model(max_multiple=40.0)
    assert [m for m, _ in model.curve()] == [2, 4, 8, 16, 32]
    flat = _model(host_s=0.001, kernel_s=0.009, fill=1.0, max_multiple=100.0)  # GPU-bound already
    assert flat.knee() == 2


def test_the_prediction_reads_its_curve_at_any_multiple():
    p = Prediction(gain=16.0, method="model", label="at 16x the batch", detail="", batch_curve=((2, 2.0), (4, 4.0),
                                                                                               (8, 6.0)),
                   batch_multiple=4)
    assert p.gain_at(4) == 4.0
    assert p.gain_at(1.5) == pytest.approx(1.5 ** 1.0)  # geometric from 1x at today's batch
    assert p.gain_at(64) == 6.0  # flat past the last point
    assert p.gain_at(0.5) is None
    assert Prediction(gain=2.0, method="replay", label="", detail="").gain_at(2) is None
    assert p.to_dict()["batch_curve"][2] == {"multiple": 8, "gain": 6.0}


def test_from_a_session_the_profile_the_gpm_fill_and_the_loader():
    profile = ProfileSummary(steps=10, kernel_total_us=10_000.0, gpu_busy_us=10_000.0, gpu_idle_us=90_000.0,
                             memcpy={"HtoD_pinned": {"count": 10, "bytes": 1e6, "us": 1000.0}})
    session = make_session(steps=make_steps(50, 0.010), gpu_samples=make_gpu_samples(20, util_percent=10.0,
                                                                                   sm_activity=2.0),
                           torch_cuda_used=True, profile=profile,
                           loaders=[make_loader(num_workers=2, batch_size=32, fetch_s_per_batch=0.004)])
    model = batch_scaling(session, 50.0)
    assert model is not None
    assert model.kernel_s == pytest.approx(0.001) and model.copy_s == pytest.approx(0.0001)
    assert model.fill == pytest.approx(0.2) and model.sync_share == 0.0
    assert model.loader_s == pytest.approx(0.002)  # 4 ms a batch, 2 workers
    assert model.max_multiple == 50.0


def test_no_step_time_no_model():
    assert batch_scaling(make_session(), None) is None


def test_the_work_of_each_epochs_end_is_per_sample_and_its_first_batch_grows_with_the_batch():
    # host 10 ms a step; 5 ms a step of epoch ends and starts, 1 ms of it the first batch's wait:
    # at 4x, four times the epochs' work per step (5 ms * 4) and each first batch 4x longer (1 ms * 4 * 3)
    model = _model(step_s=0.015, apart_s=0.005, apart_per_epoch=True, epoch_first_batch_s=0.001)
    assert model.step_at(1) == pytest.approx(0.015)
    assert model.gain(4) == pytest.approx(4 * 15 / (10 + 20 + 12))
    assert model.limit(8).startswith("the work of each epoch's end and start")
    pause = _model(step_s=0.015, apart_s=0.005)  # no epoch turned over: an occasional pause, the same per step
    assert pause.gain(4) == pytest.approx(4 * 15 / (10 + 5))


def _gan_session(dataset_len: int):
    """A GAN's run counted in DataLoader batches of 30 ms (10 ms waiting); its window counted 20 optimizer
    steps, 10 batches, with 20 ms of kernels; 10 ms a batch is epoch work the window does not hold, 2 ms
    of it waiting for each epoch's first batch (2 workers, 40 ms a batch)."""
    from gpudoctor.session import ReplaySummary

    replay = ReplaySummary(steps=20, run_steps=10, baseline_span_us=200_000.0, baseline_gpu_busy_us=20_000.0,
                           unrepresented_us=100_000.0, unrepresented_wait_us=20_000.0, calibration="calibrated")
    profile = ProfileSummary(steps=20, step_source="optimizer", kernel_total_us=20_000.0, gpu_busy_us=20_000.0,
                             gpu_idle_us=180_000.0, replay=replay)
    return make_session(steps=make_steps(160, 0.030, 0.010), torch_cuda_used=True, profile=profile,
                        loaders=[make_loader(num_workers=2, batches=160, batch_size=64, dataset_len=dataset_len,
                                             fetch_s_per_batch=0.040)])


def test_a_gan_window_is_counted_in_the_runs_batches_and_its_epochs_work_is_per_sample():
    model = batch_scaling(_gan_session(dataset_len=1000), 50.0)  # 16 batches an epoch: 10 epochs in the run
    assert model is not None
    assert model.kernel_s == pytest.approx(0.002)  # 20 ms of kernels over 10 batches, not 20 optimizer steps
    assert model.apart_s == pytest.approx(0.010) and model.apart_per_epoch
    assert model.host_s == pytest.approx(0.012)  # 30 - 10 apart - (10 - 2) waiting
    assert model.loader_s == pytest.approx(0.020)
    assert model.epoch_first_batch_s == pytest.approx(0.002)  # min(40 ms, 2 ms x 16) / 16
    assert model.step_at(1) == pytest.approx(0.030)
    # at 4x: the workers' 80 ms, the epochs' 40 ms, the first batches' 2 ms x 4 x 3
    assert model.gain(4) == pytest.approx(4 * 30 / (80 + 40 + 24))
    long_epochs = batch_scaling(_gan_session(dataset_len=100_000), 50.0)  # no epoch turned over: a pause a step
    assert long_epochs is not None and not long_epochs.apart_per_epoch
    assert long_epochs.gain(4) == pytest.approx(4 * 30 / (80 + 10))


def _in_loop_session(fetch_s_per_batch: float | None):
    """num_workers=0: a 10 ms step, 4 ms of it waiting for the loop's own batch; the loader's wait over
    the run 4 ms a batch, its fetcher (``__getitem__`` and collate) `fetch_s_per_batch` of it."""
    loader = make_loader(num_workers=0, batches=50, batch_size=32, wait_total_s=50 * 0.004,
                         fetch_s_per_batch=fetch_s_per_batch)
    profile = ProfileSummary(steps=10, kernel_total_us=1_000.0, gpu_busy_us=1_000.0, gpu_idle_us=99_000.0)
    return make_session(steps=make_steps(50, 0.010, 0.004), torch_cuda_used=True, profile=profile,
                        loaders=[loader])


def test_only_the_samples_fetch_in_the_loops_batch_production_grows_with_the_batch():
    # the fetcher took 1 ms of the 4 ms wait (25%): 1 ms a step made m times over; the other 3 ms (the
    # iterator, the sampler, pinning the batch) once per batch, with the 6 ms of launches and Python
    model = batch_scaling(_in_loop_session(fetch_s_per_batch=0.001), None)
    assert model is not None
    assert model.in_process_data_s == pytest.approx(0.001) and model.host_s == pytest.approx(0.009)
    assert model.step_at(1) == pytest.approx(0.010)
    # at 32x: 9 ms + 32 ms (the whole 4 ms made 32 times over would be 6 + 128 ms: 2.4x)
    assert model.gain(32) == pytest.approx(32 * 10 / 41, rel=1e-3)
    assert any("25% of the loader's time" in s for s in model.sources)


def test_batch_production_in_the_loop_without_a_fetch_time_all_grows():
    model = batch_scaling(_in_loop_session(fetch_s_per_batch=None), None)
    assert model is not None
    assert model.in_process_data_s == pytest.approx(0.004) and model.host_s == pytest.approx(0.006)
    assert model.gain(32) == pytest.approx(32 * 10 / (6 + 128), rel=1e-3)


@pytest.mark.parametrize(("long_steps", "per_epoch"), [(10, True), (16, True), (0, True), (3, False)])
def test_the_time_the_window_does_not_hold_is_the_epochs_work_only_when_it_comes_back_with_them(
        long_steps, per_epoch):
    # 160 unprofiled batches, 16 an epoch: 10 epochs turned over. Held by 10 or more long steps (one an
    # epoch at least; 0: not recorded) it is the epochs' work, per sample; held by 3, most epochs turned
    # over within ordinary steps: the 3 are pauses, the same per step at any batch
    session = _gan_session(dataset_len=1000)
    assert session.profile is not None and session.profile.replay is not None
    session.profile.replay.unrepresented_steps = long_steps
    model = batch_scaling(session, 50.0)
    assert model is not None and model.apart_per_epoch is per_epoch
    if per_epoch:
        assert model.gain(4) == pytest.approx(4 * 30 / (80 + 40 + 24))
    else:
        assert model.epoch_first_batch_s == 0.0
        assert model.gain(4) == pytest.approx(4 * 30 / (80 + 10))
        assert any("not the epochs' work" in s for s in model.sources)
