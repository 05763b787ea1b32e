"""GD203 clocks-held on synthetic Sessions; the power-cap case is the one measured on an H200."""

from __future__ import annotations

import pytest
from helpers import make_gpu_samples, make_session, run_check

from gpudoctor.checks.gd203_clocks import run
from gpudoctor.session import GpuInfo

H200 = GpuInfo(index=0, uuid="GPU-0", name="NVIDIA H200", power_limit_w=700.0, sm_clock_max_mhz=1980,
               gpm_supported=True, mig=False)


def clocks_session(samples, **kwargs):
    session = make_session(gpu_samples=samples, torch_cuda_used=True, **kwargs)
    session.environment.gpus = [H200]
    return session


def test_power_cap_at_full_load_is_info_fully_used():
    # bf16 8192^3 matmuls on an H200: 631 W of 700 W, SM activity 93%, clocks 1477 of 1980 MHz
    samples = make_gpu_samples(15, util_percent=100.0, sm_activity=93.0, power_w=631.0, sm_clock_mhz=1477,
                               clock_event_reasons=["SwPowerCap"])
    outcome, findings = run_check(run.check, clocks_session(samples))
    assert outcome.status == "finding"
    (f,) = findings
    assert f.severity == "info"
    assert "fully used" in f.message and "not a fault" in f.message
    assert "1477 MHz of 1980 MHz" in f.message and "631 W of its 700 W limit (90%)" in f.message
    assert f.evidence["share_of_busy_samples"].value == 100.0
    assert f.estimated_gain is None


def test_thermal_slowdown_under_load_is_a_warning_with_gain():
    hot = make_gpu_samples(10, util_percent=100.0, sm_activity=90.0, sm_clock_mhz=1200, temperature_c=88.0,
                           clock_event_reasons=["HwThermalSlowdown", "SwThermalSlowdown"])
    cool = make_gpu_samples(10, start_t=2.5, util_percent=100.0, sm_activity=90.0, sm_clock_mhz=1980)
    (f,) = run(clocks_session(hot + cool))
    assert f.severity == "warning"
    assert f.title == "Clocks held down by HwThermalSlowdown, SwThermalSlowdown"
    assert "50% of the busy samples" in f.message and "1200 MHz of 1980 MHz, 88 C" in f.message
    assert f.estimated_gain == pytest.approx(1 / (0.5 + 0.5 * 1200 / 1980), abs=0.01)
    assert "nvidia-smi -q -d PERFORMANCE" in (f.remedy.code or "")


def test_hw_slowdown_and_power_cap_together_give_two_findings():
    samples = make_gpu_samples(10, util_percent=100.0, sm_activity=95.0, power_w=690.0, sm_clock_mhz=1100,
                               clock_event_reasons=["SwPowerCap", "HwSlowdown"])
    severities = sorted(f.severity for f in run(clocks_session(samples)))
    assert severities == ["info", "warning"]


def test_busy_at_full_clock_passes():
    samples = make_gpu_samples(20, util_percent=100.0, sm_activity=96.0, power_w=500.0, sm_clock_mhz=1980)
    outcome, findings = run_check(run.check, clocks_session(samples))
    assert outcome.status == "pass" and findings == []


def test_a_transient_reason_is_ignored():
    ok = make_gpu_samples(19, util_percent=100.0, sm_activity=96.0, sm_clock_mhz=1980)
    blip = make_gpu_samples(1, start_t=10.0, util_percent=100.0, sm_clock_mhz=1500, clock_event_reasons=["HwSlowdown"])
    assert run(clocks_session(ok + blip)) == []


def test_idle_clocks_do_not_count():
    samples = make_gpu_samples(20, util_percent=0.0, sm_activity=0.0, sm_clock_mhz=345, clock_event_reasons=["Idle"])
    outcome, _ = run_check(run.check, clocks_session(samples))
    assert outcome.status == "skipped" and "never busy" in (outcome.reason or "")


def test_without_gpm_busy_but_low_power_is_a_hint():
    samples = make_gpu_samples(20, util_percent=100.0, power_w=150.0, sm_clock_mhz=1980)
    (f,) = run(clocks_session(samples, unavailable={"gpm": "GPM unsupported on this GPU"}))
    assert f.severity == "info" and "little power" in f.title
    assert f.evidence["power_share"].value == pytest.approx(21.4, abs=0.1)


def test_with_gpm_low_power_is_left_to_gd201():
    samples = make_gpu_samples(20, util_percent=100.0, sm_activity=5.0, power_w=150.0, sm_clock_mhz=1980)
    assert run(clocks_session(samples)) == []


def test_skipped_when_reasons_were_not_read():
    samples = make_gpu_samples(20, util_percent=100.0, sm_clock_mhz=1980)
    session = clocks_session(samples, unavailable={"clock_events": "clock-event reasons unavailable: Not Supported"})
    outcome, _ = run_check(run.check, session)
    assert outcome.status == "skipped" and "Not Supported" in (outcome.reason or "")


def test_skipped_without_gpu():
    outcome, _ = run_check(run.check, make_session(unavailable={"gpu": "no NVIDIA GPU found"}))
    assert outcome.status == "skipped"
