"""Step rate of a host that ran ahead of the GPU: the steps take as long as their GPU work.

Synthetic sessions with known answers, shaped like the H200's fp32 TF32 trial: 40 steps
queued in 40 ms by the host while each step's GPU work took 18 ms.
"""

from __future__ import annotations

import pytest

from gpudoctor import metrics
from gpudoctor.session import ProfileSummary, StepRecord
from tests.helpers import make_session


def _session(host_step_s: float, gpu_busy_per_step_s: float, steps: int = 40):
    records = [StepRecord(t=1.0 + (i + 1) * host_step_s, duration_s=host_step_s, data_wait_s=0.0)
               for i in range(steps)]
    window = ProfileSummary(steps=20, gpu_busy_us=20 * gpu_busy_per_step_s * 1e6,
                            idle_gap_kernel_to_kernel_us=20 * 50.0)
    return make_session(steps=records, warmup_steps=5, step_source="optimizer", profile=window)


def test_host_that_queued_its_steps_gets_the_gpu_step_time():
    summary = metrics.step_summary(_session(host_step_s=0.001, gpu_busy_per_step_s=0.018))
    assert summary is not None
    # 18 ms of kernels plus 50 us of back-to-back kernel gaps per step
    assert summary.step_time_median_s == pytest.approx(0.01805)
    assert summary.steps_per_s == pytest.approx(1 / 0.01805)


def test_host_bound_steps_keep_their_own_time():
    # the host's 5 ms steps with 2 ms of GPU work each: the host is the limit, its steps are the steps
    summary = metrics.step_summary(_session(host_step_s=0.005, gpu_busy_per_step_s=0.002))
    assert summary is not None
    assert summary.step_time_median_s == pytest.approx(0.005)
    assert summary.steps_per_s == pytest.approx(200.0)


def test_gpu_bound_steps_that_blocked_the_host_keep_their_own_time():
    # a full launch queue blocks the host: its step time is the GPU's, give or take the trace
    summary = metrics.step_summary(_session(host_step_s=0.020, gpu_busy_per_step_s=0.021))
    assert summary is not None
    assert summary.steps_per_s == pytest.approx(50.0)


def test_cheaper_gpu_work_of_a_host_that_ran_ahead_gains_what_the_gpu_time_gains():
    # The H200's 40-step fp32 run: the host queued 1 ms steps for 107 ms of GPU work each, and
    # the window's span holds the backlog of the steps before it. TF32 makes a step as much
    # shorter as its GPU work (its trial measured 5.95x), not as much as the span.
    from pathlib import Path

    from gpudoctor.analysis.prediction import predict
    from gpudoctor.session import Session

    session = Session.load(Path(__file__).resolve().parent.parent / "fixtures" / "h200" / "fp32_matmul.session.json")
    assert metrics.host_ran_ahead(session)
    replay = session.profile.replay
    tf32 = next(s for s in replay.scenarios if s.name == "tf32")
    prediction = predict(session, "tf32", host_side=False)
    assert prediction is not None and prediction.method == "replay"
    assert prediction.gain == pytest.approx(replay.baseline_gpu_busy_us / tf32.gpu_busy_us)
    assert 5.95 * 0.7 < prediction.gain < 5.95 * 1.3
