"""Predictions (replay, bound, rule), the GPU-bound verdict, and the engine's use of them."""

from __future__ import annotations

import pytest
from helpers import make_gpu_samples, make_loader, make_session, make_steps

from gpudoctor.analysis.gpu_state import fully_used
from gpudoctor.analysis.prediction import predict, severity_for
from gpudoctor.base import exitcodes
from gpudoctor.model import Check, Finding
from gpudoctor.session import ProfileSummary, ReplayScenario, ReplaySummary
from gpudoctor.verdict.build import build_report
from gpudoctor.verdict.engine import exit_status, order, run_checks

# the idle GPU, declared as such (measures_idle) and explaining nothing: only the replay relates findings
IDLE_ONLY = {"GD201": Check(id="GD201", slug="gpu-idle", stage=2, title="GPU idle", run=lambda s: [],
                            measures_idle=True)}


def replay(**spans: float) -> ProfileSummary:
    """A profile whose replay took 100 ms as measured and `spans[name]` ms without each cause."""
    summary = ReplaySummary(steps=10, measured_span_us=100_000.0, baseline_span_us=100_000.0,
                            baseline_gpu_busy_us=20_000.0, calibration="host costs as traced")
    for name, ms in spans.items():
        if "+" in name:
            summary.combined[name] = ms * 1e3
        else:
            summary.scenarios.append(ReplayScenario(name=name, label=f"without {name}", span_us=ms * 1e3,
                                                    gpu_busy_us=20_000.0 if name != "tf32" else 5_000.0))
    return ProfileSummary(steps=10, kernel_count=500, gpu_busy_us=20_000.0, gpu_idle_us=80_000.0, replay=summary)


def test_replay_gain_with_the_step_times_it_implies():
    session = make_session(steps=make_steps(50, 0.010), profile=replay(data=40.0))
    p = predict(session, "data", host_side=True)
    assert p is not None and p.method == "replay" and p.gain == pytest.approx(2.5)
    assert p.step_time_s == pytest.approx(0.010) and p.predicted_step_time_s == pytest.approx(0.004)
    assert "replay of the profiled window (10 steps" in p.detail
    assert "replayed:" not in p.detail  # the whole window


def test_a_long_window_replayed_in_part_says_which_part():
    profile = replay(data=40.0)
    profile.replay.scope = "the last 10 of 80 steps (90.0 of 700.0 ms), 150,000 of 1,000,000 events"  # type: ignore[union-attr]
    p = predict(make_session(steps=make_steps(50, 0.010), profile=profile), "data", host_side=True)
    assert p is not None and p.gain == pytest.approx(2.5)
    assert "; replayed: the last 10 of 80 steps (90.0 of 700.0 ms), 150,000 of 1,000,000 events" in p.detail


def test_a_host_side_fix_cannot_beat_what_the_gpu_allows():
    # the replay says 2.5x, but the GPU was busy 80% of the steady steps: at most 1.25x
    session = make_session(steps=make_steps(50, 0.010), profile=replay(data=40.0), torch_cuda_used=True,
                           gpu_samples=make_gpu_samples(20, util_percent=80.0, start_t=0.0, interval_s=0.02))
    p = predict(session, "data", host_side=True)
    assert p is not None and p.method == "bound" and p.gain == pytest.approx(1.25)
    assert "busy 80%" in p.detail and "2.50x" in p.detail
    # the GPU's own work getting cheaper is not capped by how busy the GPU is
    gpu_side = predict(session, "data", host_side=False)
    assert gpu_side is not None and gpu_side.gain == pytest.approx(2.5)


def test_rule_when_there_is_no_replay_and_no_gpu_sample():
    session = make_session(steps=make_steps(50, 0.010))
    p = predict(session, "data", host_side=True, rule_gain=1.6, rule_detail="1 / (1 - 38% data wait)")
    assert p is not None and (p.method, p.gain, p.scenario) == ("rule", 1.6, None)
    assert predict(session, "data", host_side=True) is None  # nothing to estimate it from


def test_severity_follows_the_gain():
    assert severity_for(1.02) == "info"
    assert severity_for(1.0 / 0.95) == "warning"
    assert severity_for(1.0 / 0.70) == "critical"


def finding(check_id: str, severity: str, scenario: str | None, gain: float | None, profile=None) -> Finding:
    from gpudoctor.analysis.prediction import Prediction

    prediction = Prediction(gain=gain, method="replay", label="", detail="", scenario=scenario) if gain else None
    return Finding(severity=severity, title=check_id, message="", id=check_id, stage=3, prediction=prediction)


def test_replay_decides_which_cause_explains_the_other():
    # removing syncs: 100 -> 60 ms; launches: 100 -> 80 ms; both: 58 ms. After the syncs are gone
    # the launches buy 60/58 = 1.03x: a consequence of the syncs, ranked under them
    session = make_session(profile=replay(sync=60.0, launch=80.0, **{"sync+launch": 58.0}))
    ordered = order([finding("GD301", "warning", "launch", 1.25), finding("GD302", "critical", "sync", 1.67)],
                    session, {})
    assert [f.id for f in ordered] == ["GD302", "GD301"]
    assert ordered[1].consequence_of == "GD302" and ordered[0].consequence_of is None
    # when both still pay after the other, both stand, ranked by predicted gain
    session = make_session(profile=replay(sync=60.0, launch=55.0, **{"sync+launch": 30.0}))
    ordered = order([finding("GD302", "critical", "sync", 1.67), finding("GD301", "critical", "launch", 1.82)],
                    session, {})
    assert [f.id for f in ordered] == ["GD301", "GD302"] and not any(f.consequence_of for f in ordered)


def test_the_idle_gpu_is_explained_by_the_cause_that_removes_most_of_its_idle_time():
    # idle now 80 of 100 ms; without data waits the window is 25 ms with 20 ms busy: 5 ms idle
    session = make_session(profile=replay(data=25.0))
    idle = Finding(severity="critical", title="GPU mostly idle", message="", id="GD201", stage=2)
    ordered = order([idle, finding("GD102", "critical", "data", 4.0)], session, IDLE_ONLY)
    assert ordered[0].id == "GD102" and ordered[1].consequence_of == "GD102"
    # a cause that leaves most of the idle time in place does not explain it
    session = make_session(profile=replay(data=90.0))
    ordered = order([idle, finding("GD102", "warning", "data", 1.11)], session, IDLE_ONLY)
    assert all(f.consequence_of is None for f in ordered)


def always(check_id: str, severity: str, stage: int) -> Check:
    return Check(id=check_id, slug=check_id.lower(), stage=stage, title=check_id,
                 run=lambda s: [Finding(severity=severity, title=f"{check_id} title", message="m")])


def test_no_critical_finding_while_the_gpu_is_fully_used_and_the_verdict_says_gpu_bound():
    samples = make_gpu_samples(20, util_percent=100.0, sm_activity=92.0, tensor_activity=80.0,
                               interval_s=0.02)
    session = make_session(steps=make_steps(50, 0.010), gpu_samples=samples, torch_cuda_used=True)
    assert fully_used(session) is not None
    result = run_checks(session, [always("GD304", "critical", 3)])
    assert [f.severity for f in result.findings] == ["warning"]
    verdict = build_report(session, result, docs={})["summary"]["verdict"]
    assert verdict.startswith("GPU-bound: the GPU is fully used (SM activity 92%, tensor-core activity 80%")
    assert "GD304" in verdict


def test_a_busy_duty_cycle_alone_is_not_a_fully_used_gpu():
    # tiny kernels keep the duty cycle at 100% with a sliver of the SMs
    samples = make_gpu_samples(20, util_percent=100.0, sm_activity=3.0, interval_s=0.02)
    session = make_session(steps=make_steps(50, 0.010), gpu_samples=samples, torch_cuda_used=True)
    assert fully_used(session) is None


def test_few_steady_steps_are_a_caveat_and_never_critical():
    session = make_session(steps=make_steps(4, 0.010, 0.008), loaders=[make_loader(batches=4)])
    result = run_checks(session, [always("GD102", "critical", 1)])
    assert result.findings[0].severity == "warning"
    verdict = build_report(session, result, docs={})["summary"]["verdict"]
    assert "from only 4 steady steps" in verdict


def test_a_run_that_measured_nothing_says_so_and_fails_a_gate():
    session = make_session(stop_reason="duration", torch_cuda_used=True)
    session.steps.count = 0
    result = run_checks(session, [])
    report = build_report(session, result, docs={})
    assert report["summary"]["measured"] is False
    assert report["summary"]["verdict"].startswith("Nothing steady was measured: the run ended before its first step")
    assert exit_status(0, result.findings, "critical", measured=False) == exitcodes.FAIL_ON
    assert exit_status(0, result.findings, None, measured=False) == 0  # no gate asked for: the workload's code


def test_no_dataloader_means_data_wait_not_measured_not_zero():
    session = make_session(steps=make_steps(50, 0.010))
    report = build_report(session, run_checks(session, []), docs={})
    assert report["summary"]["data_wait_share"] is None
    assert "waited for data" not in report["summary"]["verdict"]
