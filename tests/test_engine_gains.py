"""The engine ranks by gain: the biggest gain leads the verdict, one number per remedy, measured over predicted."""

from __future__ import annotations

import dataclasses

from helpers import make_session, make_steps

from gpudoctor.analysis.prediction import Prediction
from gpudoctor.model import Check, Finding, Remedy
from gpudoctor.trials.records import TrialResult, Trials
from gpudoctor.verdict.build import build_report
from gpudoctor.verdict.engine import EngineResult, order, run_checks, with_trials

WORKERS = Remedy(text="Set num_workers=8.", knobs={"num_workers": "more"})


def _check(check_id: str, stage: int, explains: tuple[str, ...] = (), owns: tuple[str, ...] = (),
           finding: Finding | None = None) -> Check:
    return Check(id=check_id, slug=check_id.lower(), stage=stage, title=check_id,
                 run=lambda s: [finding] if finding is not None else [], explains=explains, owns=owns)


def _finding(check_id: str, stage: int, gain: float | None, method: str = "replay", severity: str | None = None,
             remedy: Remedy | None = None, label: str = "without the cause") -> Finding:
    prediction = Prediction(gain=gain, method=method, label=label, detail=f"{check_id}'s model") if gain else None
    if severity is None:
        severity = "critical" if (gain or 1.0) >= 1.43 else "warning"
    return Finding(severity=severity, title=f"{check_id} title", message=f"{check_id} says.", remedy=remedy,
                   prediction=prediction, id=check_id, stage=stage)


def _judge(findings: list[Finding], explains: dict[str, tuple[str, ...]] | None = None,
           owns: dict[str, tuple[str, ...]] | None = None, trials: Trials | None = None) -> tuple[EngineResult, str]:
    checks = [_check(f.id, f.stage, (explains or {}).get(f.id, ()), (owns or {}).get(f.id, ()), f)
              for f in findings]
    session = make_session(steps=make_steps(50, 0.100, 0.012))
    session.trials = trials
    result = run_checks(session, checks)
    return result, build_report(session, result, docs={})["summary"]["verdict"]


def test_the_verdict_names_the_largest_gain_not_the_first_stage():
    """8-16% data wait (1.18x) beside a 1.75x launch-bound prediction: the launch chains lead.
    The batch size (no prediction) cannot explain away a finding that predicts clearly more."""
    data = _finding("GD102", 1, 1.18)
    batch = _finding("GD202", 2, None, severity="warning")
    launch = _finding("GD301", 3, 1.75)
    result, verdict = _judge([data, batch, launch], explains={"GD102": ("GD202",), "GD202": ("GD301",)})
    assert [f.id for f in result.findings][:2] == ["GD301", "GD102"]
    assert result.findings[0].consequence_of is None
    assert verdict.startswith("Kernel-bound: GD301 title")


def test_a_near_tie_goes_to_the_earlier_stage_and_a_clear_lead_does_not():
    within = order([_finding("GD301", 3, 1.70), _finding("GD102", 1, 1.60)], checks={})
    assert [f.id for f in within] == ["GD102", "GD301"]  # 1.70 / 1.60 = 1.06: a near-tie, input first
    clear = order([_finding("GD301", 3, 1.80), _finding("GD102", 1, 1.60)], checks={})
    assert [f.id for f in clear] == ["GD301", "GD102"]  # 1.80 / 1.60 = 1.125: the larger gain leads
    # severity no longer outranks the gain: a warning at 1.40x (the playbook's stage 1) beside a
    # critical 1.45x is a near-tie, so the input pipeline comes first
    mixed = order([_finding("GD301", 3, 1.45), _finding("GD102", 1, 1.40)], checks={})
    assert [f.id for f in mixed] == ["GD102", "GD301"]


def test_a_declared_explanation_still_holds_when_the_cause_buys_as_much():
    data = _finding("GD102", 1, 2.0)
    busy = _finding("GD103", 1, 2.0)
    result, verdict = _judge([data, busy], explains={"GD102": ("GD103",)})
    assert next(f for f in result.findings if f.id == "GD103").consequence_of == "GD102"
    assert verdict.startswith("Host-bound: GD102 title")  # stage 1 without a DataLoader: the host


def test_one_number_per_remedy_the_replay_over_the_rule_the_other_a_cross_check():
    """GD101 (rule, 7.5x with 14 workers) and GD102 (replay, 33.9x instant batches) advise the same change."""
    rule = _finding("GD101", 1, 7.5, method="rule", remedy=WORKERS, label="with num_workers=14")
    replay = _finding("GD102", 1, 33.9, method="replay", remedy=WORKERS, label="if batches arrived instantly")
    result, _ = _judge([rule, replay], owns={"GD101": ("num_workers",)})
    by_id = {f.id: f for f in result.findings}
    assert by_id["GD101"].estimated_gain == by_id["GD102"].estimated_gain == 33.9
    assert "cross-check" in by_id["GD101"].message and "7.50x" in by_id["GD101"].message
    assert "cross-check" not in by_id["GD102"].message


def test_one_number_per_remedy_an_equal_method_goes_to_the_knobs_owner():
    sized = _finding("GD101", 1, 5.2, remedy=WORKERS, label="with num_workers=14")
    instant = _finding("GD102", 1, 33.9, remedy=WORKERS, label="if batches arrived instantly")
    result, _ = _judge([sized, instant], owns={"GD101": ("num_workers",)})
    gains = {f.id: f.estimated_gain for f in result.findings}
    assert gains == {"GD101": 5.2, "GD102": 5.2}
    stall = next(f for f in result.findings if f.id == "GD102")
    assert stall.prediction is not None and stall.prediction.label == "with num_workers=14"
    assert "33.90x if batches arrived instantly (replay), is its cross-check" in stall.message


def test_findings_that_do_not_share_a_remedy_keep_their_own_numbers():
    pin = Remedy(text="Pin memory.", knobs={"pin_memory": "on"})
    result, _ = _judge([_finding("GD101", 1, 2.0, remedy=WORKERS), _finding("GD105", 1, 3.0, remedy=pin)])
    assert {f.id: f.estimated_gain for f in result.findings} == {"GD101": 2.0, "GD105": 3.0}


def _trial(finding: str, measured: float, status: str = "measured") -> Trials:
    return Trials(requested=["auto"], results=[TrialResult(name="workers", label="num_workers=8",
                                                           findings=[finding], predicted_gain=2.25,
                                                           measured_gain=measured, status=status)])


def test_a_remedy_measured_without_gain_is_demoted_and_the_verdict_says_so():
    """Issue 19's loader-overlapped loop: 8 workers predicted 2.25x, the trial measured 0.97x."""
    data = _finding("GD102", 1, 2.25, remedy=WORKERS)
    launch = _finding("GD301", 3, 1.5)
    result, verdict = _judge([data, launch], trials=_trial("GD102", 0.97))
    stall = next(f for f in result.findings if f.id == "GD102")
    assert stall.severity == "warning" and stall.measured_gain == 0.97
    assert "no longer critical" in stall.message
    assert result.findings[0].id == "GD301"  # ranked by what was measured
    assert verdict.startswith("Kernel-bound")
    assert "GD102's remedy (num_workers=8) gave 0.97x against 2.25x predicted (demoted" in verdict


def test_a_trial_that_gained_or_was_inconclusive_changes_nothing():
    data = _finding("GD102", 1, 2.25, remedy=WORKERS)
    for trials in (_trial("GD102", 1.9), _trial("GD102", 0.9, status="inconclusive")):
        result, _ = _judge([data], trials=trials)
        assert result.findings[0].severity == "critical" and result.findings[0].measured_gain is None


def test_trials_measured_after_the_judging_reorder_the_result():
    data = _finding("GD102", 1, 2.25, remedy=WORKERS)
    launch = _finding("GD301", 3, 1.5)
    session = make_session(steps=make_steps(50, 0.100, 0.012))
    checks = [_check("GD102", 1, finding=data), _check("GD301", 3, finding=launch)]
    before = run_checks(session, checks)
    assert before.findings[0].id == "GD102"
    session.trials = _trial("GD102", 1.01)
    after = with_trials(before, session, checks)
    assert [f.id for f in after.findings] == ["GD301", "GD102"]
    assert after.findings[1].severity == "warning"


# ---- a bound is not a remedy (syn_forloop_adamw, 2026-12-04 on the H200) ----
def _idle_bound() -> Finding:
    return _finding("GD201", 2, 5.34, method="bound", severity="critical", label="if the GPU never idled")


def _symptom_check(finding: Finding) -> Check:
    return Check(id="GD201", slug="gpu-idle", stage=2, title="GD201", run=lambda s: [finding], measures_idle=True)


def test_the_idle_bound_follows_the_concrete_remedies_even_when_nothing_explains_it():
    """GD201's 5.34x is "if the GPU never idled": no one change buys it. The headline goes to the
    causes with remedies, the optimizer's 1.69x first."""
    idle = _idle_bound()
    optimizer = _finding("GD305", 3, 1.69)
    launch = _finding("GD301", 3, 1.59)
    checks = [_symptom_check(idle), _check("GD305", 3, finding=optimizer), _check("GD301", 3, finding=launch)]
    session = make_session(steps=make_steps(50, 0.0167))
    result = run_checks(session, checks)
    assert [f.id for f in result.findings] == ["GD305", "GD301", "GD201"]
    verdict = build_report(session, result, docs={})["summary"]["verdict"]
    assert verdict.startswith("Kernel-bound: GD305 title")


def test_two_causes_together_explain_the_idle_gpu_neither_explains_alone():
    """syn_forloop_adamw's shape: 16.7 ms steps, 3.1 ms of kernels. Fused updates alone leave 6.85 ms
    idle, captured launches alone 7.4 ms: each over half of the 13.6 ms idle now; both together
    leave 1.5 ms. The idle GPU is their consequence, named after the larger gain of the two."""
    from gpudoctor.session import ProfileSummary, ReplayScenario, ReplaySummary

    replay = ReplaySummary(steps=1, baseline_span_us=16_700.0, baseline_gpu_busy_us=3_100.0,
                           baseline_kernel_busy_us=3_100.0,
                           scenarios=[ReplayScenario("optimizer", "fused", 9_950.0, 3_100.0, 3_100.0),
                                      ReplayScenario("launch", "graphs", 10_500.0, 3_100.0, 3_100.0)],
                           combined={"optimizer+launch": 4_600.0})
    session = make_session(steps=make_steps(50, 0.0167), profile=ProfileSummary(steps=1, replay=replay))

    def replayed(check_id: str, gain: float, scenario: str) -> Finding:
        f = _finding(check_id, 3, gain)
        assert f.prediction is not None
        return dataclasses.replace(f, prediction=dataclasses.replace(f.prediction, scenario=scenario))

    optimizer, launch = replayed("GD305", 1.69, "optimizer"), replayed("GD301", 1.59, "launch")
    idle = _idle_bound()
    checks = {"GD201": _symptom_check(idle), "GD305": _check("GD305", 3), "GD301": _check("GD301", 3)}
    ordered = order([idle, optimizer, launch], session, checks)
    by_id = {f.id: f for f in ordered}
    assert by_id["GD201"].consequence_of == "GD305"
    assert by_id["GD305"].consequence_of is None and by_id["GD301"].consequence_of is None
    assert ordered[0].id == "GD305"
    # without the pair's combined replay, neither cause explains the idle GPU (each leaves over half of it)
    replay.combined.clear()
    assert {f.id: f for f in order([idle, optimizer, launch], session, checks)}["GD201"].consequence_of is None
