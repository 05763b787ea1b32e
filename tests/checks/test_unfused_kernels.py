"""GD306 (unfused elementwise kernels on a busy GPU) on hand-built sessions with known answers.

The replay's ``compiled`` what-if is given: a window of 10 steps that took 100 ms replayed as
measured, and `fused_ms` with each run of elementwise kernels fused. The check speaks only
where the GPU was busy (an idle GPU waits for its host: GD301's case) and the gain reaches
the line every finding shares.
"""

from __future__ import annotations

import pytest
from helpers import make_session, make_steps, run_check

from gpudoctor.checks import gd301_launch_bound, gd306_unfused_kernels
from gpudoctor.session import ProfileSummary, ReplayScenario, ReplaySummary

CHECK = gd306_unfused_kernels.run.check


def window(fused_ms: float | None, *, idle_ms: float = 0.0, median_us: float = 200.0) -> ProfileSummary:
    """1000 kernels over 100 ms of span, `idle_ms` of it idle; the replay's compiled what-if at `fused_ms`."""
    busy = 100_000.0 - idle_ms * 1e3
    summary = ReplaySummary(steps=10, measured_span_us=100_000.0, baseline_span_us=100_000.0,
                            baseline_gpu_busy_us=busy, calibration="host costs as traced")
    if fused_ms is not None:
        summary.scenarios.append(ReplayScenario(name="compiled", label="if the model were compiled",
                                                span_us=fused_ms * 1e3, gpu_busy_us=busy - (100.0 - fused_ms) * 1e3))
    return ProfileSummary(steps=10, window_s=0.1, kernel_count=1000, kernel_total_us=busy, kernel_median_us=median_us,
                          gpu_busy_us=busy, gpu_idle_us=idle_ms * 1e3, launch_count=1000, launch_total_us=5_000.0,
                          replay=summary)


def session(profile: ProfileSummary):
    return make_session(steps=make_steps(50, 0.010), step_source="optimizer", profile=profile)


def test_a_busy_gpu_whose_elementwise_chains_fuse_gets_the_compiled_gain():
    outcome, (f,) = run_check(CHECK, session(window(fused_ms=80.0)))
    assert outcome.status == "finding" and f.severity == "warning"
    assert f.prediction is not None and f.prediction.method == "replay"
    assert f.prediction.gain == pytest.approx(1.25) and f.estimated_gain == pytest.approx(1.25)
    assert f.evidence["compiled_gain"].value == pytest.approx(1.25)
    assert f.evidence["gpu_busy_now"].value == pytest.approx(100.0)
    assert f.evidence["gpu_busy_fused"].value == pytest.approx(80.0)
    assert "20.0 ms of its 100.0 ms of GPU work" in f.message
    assert "torch.compile(model)" in f.remedy.text


def test_a_large_fused_gain_is_critical():
    _, (f,) = run_check(CHECK, session(window(fused_ms=50.0)))
    assert f.severity == "critical" and f.prediction.gain == pytest.approx(2.0)


def test_a_gain_under_the_line_says_nothing():
    outcome, findings = run_check(CHECK, session(window(fused_ms=97.0)))
    assert outcome.status == "pass" and not findings


def test_an_idle_gpu_is_left_to_gd301_which_carries_the_same_number():
    # tiny kernels, the GPU idle half the span: launch-bound; GD301 gives plain compile as its compiled_gain
    idle = window(fused_ms=80.0, idle_ms=50.0, median_us=3.0)
    assert idle.replay is not None
    idle.replay.scenarios.append(ReplayScenario(name="launch", label="if captured", span_us=40_000.0,
                                                gpu_busy_us=50_000.0))
    outcome, findings = run_check(CHECK, session(idle))
    assert outcome.status == "pass" and not findings
    _, (launch_bound,) = run_check(gd301_launch_bound.run.check, session(idle))
    assert launch_bound.evidence["compiled_gain"].value == pytest.approx(1.25)


def test_an_idle_gpu_whose_kernels_are_not_tiny_is_not_this_finding_either():
    # the GPU waits for something else (the loader, syncs): fusing its kernels is not what it lacks
    outcome, findings = run_check(CHECK, session(window(fused_ms=80.0, idle_ms=50.0)))
    assert outcome.status == "pass" and not findings


def test_without_the_compiled_what_if_there_is_nothing_to_fuse():
    outcome, findings = run_check(CHECK, session(window(fused_ms=None)))
    assert outcome.status == "pass" and not findings


def test_skipped_without_a_replay():
    profile = window(fused_ms=80.0)
    profile.replay = None
    outcome, findings = run_check(CHECK, session(profile))
    assert outcome.status == "skipped" and not findings and "no replay" in (outcome.reason or "")


def test_skipped_with_too_few_kernels_to_judge():
    profile = window(fused_ms=80.0)
    profile.kernel_count = 40
    outcome, _ = run_check(CHECK, session(profile))
    assert outcome.status == "skipped" and "only 40 kernels" in (outcome.reason or "")


def test_page_names_its_thresholds_and_remedy():
    doc = CHECK.doc
    assert doc.startswith("GD306 unfused-kernels:")
    for section in ("What it detects", "Why it matters", "How it is measured", "Thresholds", "What to do"):
        assert section in doc
    assert CHECK.fix is not None and CHECK.fix.scenarios == ("compiled",)
