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
