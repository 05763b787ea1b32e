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
