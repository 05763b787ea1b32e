"""GD201 gpu-idle on synthetic Sessions; the numbers are those measured on an H200."""

from __future__ import annotations

import pytest
from helpers import make_gpu_samples, make_session, make_steps, run_check

from gpudoctor.checks.gd201_gpu_idle import run
from gpudoctor.session import GpuInfo

GIB = 2**30
H200 = GpuInfo(index=0, uuid="GPU-0", name="NVIDIA H200", memory_total_bytes=141 * GIB, power_limit_w=700.0,
               sm_clock_max_mhz=1980, gpm_supported=True, mig=False)


def session_with(samples, **kwargs):
    session = make_session(gpu_samples=samples, torch_cuda_used=True, **kwargs)
    session.environment.gpus = [H200]
    return session


def test_tiny_kernel_loop_duty_cycle_17_but_sm_activity_002_is_critical():
    session = session_with(make_gpu_samples(20, util_percent=17.0, sm_activity=0.02, tensor_activity=0.0,
                                            memory_used_bytes=2 * GIB))
    outcome, findings = run_check(run.check, session)
    assert outcome.status == "finding"
    (f,) = findings
    assert f.severity == "critical"
    assert "SMs barely work" in f.title
    assert "duty cycle" in f.message and "SM activity" in f.message and "17%" in f.message
    assert "GD301" in f.message
    assert f.evidence["util_percent"].value == 17.0 and f.evidence["sm_activity"].value == 0.02
    assert f.estimated_gain == pytest.approx(100 / 17, abs=0.01)
    assert "torch.compile" in (f.remedy.code or "")


def test_busy_duty_cycle_with_idle_sms_is_a_warning_without_gain():
    (f,) = run(session_with(make_gpu_samples(20, util_percent=95.0, sm_activity=30.0)))
    assert f.severity == "warning"
    assert f.title == "GPU looks busy, but its SMs are mostly idle"
    assert "95% duty cycle with 30% SM activity" in f.message
    assert f.estimated_gain is None  # filling the SMs depends on the kernels


def test_bf16_matmuls_pass():
    session = session_with(make_gpu_samples(20, util_percent=100.0, sm_activity=96.0, tensor_activity=93.0))
    outcome, findings = run_check(run.check, session)
    assert outcome.status == "pass" and findings == []


def test_without_gpm_the_duty_cycle_is_used_and_the_limit_said():
    session = session_with(make_gpu_samples(20, util_percent=30.0), unavailable={"gpm": "GPM unsupported on A100"})
    (f,) = run(session)
    assert f.severity == "warning"
    assert "GPM unsupported on A100" in f.message and "overstates" in f.message
    assert f.estimated_gain == pytest.approx(100 / 30, abs=0.01)
    assert "sm_activity" not in f.evidence


def test_memory_full_but_idle():
    (f,) = run(session_with(make_gpu_samples(20, util_percent=4.0, sm_activity=1.0, memory_used_bytes=130 * GIB)))
    assert f.severity == "critical"
    assert "92% full" in f.message
    assert f.evidence["memory_used_share"].value == pytest.approx(92.2, abs=0.1)
    assert f.estimated_gain == 10.0  # capped


def test_only_steady_samples_count():
    # 5 warm-up steps of 0.5 s while the GPU idles, then 15 busy steps
    idle = make_gpu_samples(10, interval_s=0.25, util_percent=0.0, sm_activity=0.0)
    busy = make_gpu_samples(30, interval_s=0.25, start_t=2.5, util_percent=100.0, sm_activity=95.0)
    session = session_with(idle + busy, steps=make_steps(20, 0.5), warmup_steps=5)
    assert run(session) == []


def test_skipped_without_gpu_samples():
    outcome, _ = run_check(run.check, make_session(unavailable={"gpu": "no NVIDIA driver found"}))
    assert outcome.status == "skipped" and "no NVIDIA driver found" in (outcome.reason or "")


def test_skipped_when_the_workload_used_no_cuda():
    session = make_session(gpu_samples=make_gpu_samples(20, util_percent=0.0), torch_cuda_used=False)
    outcome, _ = run_check(run.check, session)
    assert outcome.status == "skipped" and "no work on a CUDA device" in (outcome.reason or "")


def test_skipped_with_too_few_samples():
    outcome, _ = run_check(run.check, session_with(make_gpu_samples(2, util_percent=5.0)))
    assert outcome.status == "skipped" and "too few" in (outcome.reason or "")


def test_skipped_in_mig_mode_without_any_activity_value():
    outcome, _ = run_check(run.check, session_with(make_gpu_samples(10, memory_used_bytes=GIB)))
    assert outcome.status == "skipped" and "MIG" in (outcome.reason or "")


def test_steps_shorter_than_the_sample_interval_are_not_judged_on_start_up_samples():
    # seen on the H200 (oom workload): 9.5 s of CUDA start-up at 0%, then all steps within 0.1 s
    idle_start = make_gpu_samples(38, interval_s=0.25, util_percent=0.0, sm_activity=0.0)  # t = 0.25 .. 9.5
    busy = make_gpu_samples(1, interval_s=0.25, start_t=9.5, util_percent=90.0, sm_activity=80.0)  # 9.75
    idle_end = make_gpu_samples(2, interval_s=0.25, start_t=9.75, util_percent=0.0, sm_activity=0.0)
    steps = make_steps(15, 0.007, start_t=9.52)  # 9.527 .. 9.625
    session = session_with(idle_start + busy + idle_end, steps=steps, warmup_steps=2, gpu_sample_interval_s=0.25)
    from gpudoctor import metrics

    # only the sample that straddles the steps measured them; never the whole run
    assert [s.t for s in metrics.gpu_samples_steady(session)] == [9.75]
    outcome, _ = run_check(run.check, session)
    assert outcome.status == "skipped" and "too few" in (outcome.reason or "")
