"""The engine reconciles findings that advise opposite ways on one knob: one remedy per setting."""

from __future__ import annotations

from gpudoctor.model import Check, Finding, Remedy
from gpudoctor.verdict.engine import reconcile


def _check(check_id: str, owns: tuple[str, ...] = ()) -> Check:
    return Check(id=check_id, slug=check_id.lower(), stage=1, title=check_id, run=lambda s: [], owns=owns)


def _finding(check_id: str, remedy: Remedy, gain: float = 2.0, severity: str = "critical") -> Finding:
    return Finding(severity=severity, title=f"{check_id} title", message=f"{check_id} says.", remedy=remedy,
                   estimated_gain=gain, id=check_id, stage=1)


MORE = Remedy(text="Set num_workers=1.", code="loader = DataLoader(dataset, num_workers=1)",
              knobs={"num_workers": "more"})
KEEP = Remedy(text="Do not add workers (the cores are full): make each sample cheaper.", code="offline()",
              knobs={"num_workers": "keep"}, without_knobs=Remedy(text="Make each sample cheaper.", code="offline()"))
CHECKS = {"GD101": _check("GD101", owns=("num_workers",)), "GD102": _check("GD102"), "GD103": _check("GD103")}


def test_the_knobs_owner_prevails_and_the_other_advises_without_the_knob():
    findings = [_finding("GD101", MORE, gain=1.9), _finding("GD102", MORE, gain=1.9), _finding("GD103", KEEP, 1.9)]
    out = reconcile(findings, CHECKS)
    assert out[0] is findings[0] and out[1] is findings[1]
    assert out[2].remedy == Remedy(text="Make each sample cheaper.", code="offline()")
    assert "GD101" in out[2].message and out[2].severity == "critical"
    ways = {f.remedy.knobs.get("num_workers") for f in out if f.remedy is not None} - {None}
    assert ways == {"more"}


def test_without_an_owner_the_larger_gain_prevails_and_its_remedy_is_quoted():
    keep = Remedy(text="Keep the workers.", knobs={"num_workers": "keep"})
    out = reconcile([_finding("GD102", MORE, gain=3.0), _finding("GD103", keep, gain=1.2)], CHECKS)
    assert out[1].remedy is not None and out[1].remedy.text == "On num_workers: Set num_workers=1."
    assert out[1].remedy.code == MORE.code


def test_agreeing_findings_are_left_alone():
    findings = [_finding("GD101", MORE), _finding("GD102", MORE), _finding("GD103", Remedy(text="Cut Python."))]
    assert reconcile(findings, CHECKS) == findings


def test_a_skipped_check_that_decides_the_main_question_is_named_in_the_verdict_unless_ignored():
    from helpers import make_session, make_steps

    from gpudoctor.model import Skip
    from gpudoctor.session import Session
    from gpudoctor.verdict.build import build_report
    from gpudoctor.verdict.engine import run_checks

    def never(session: Session) -> list[Finding]:
        raise Skip("no DataLoader was iterated")

    data = Check(id="GD102", slug="input-stall", stage=1, title="stall", run=never, decides="data wait")
    session = make_session(steps=make_steps(50, 0.100, 0.0))  # 50 steady steps, no loader
    verdict = build_report(session, run_checks(session, [data]), docs={})["summary"]["verdict"]
    assert verdict.startswith("Data wait not measured: no DataLoader was iterated; no bottleneck found")
    ignored = build_report(session, run_checks(session, [data], ignore=["GD102"]), docs={})["summary"]["verdict"]
    assert "not measured" not in ignored


def test_the_built_in_checks_never_advise_both_ways_on_the_workers():
    """num_workers=0 on 2 cores that the workload's own threads fill (GD103: "do not add
    workers"), while GD101 sizes one worker from the measured batch cost: one remedy stands."""
    from helpers import make_cpu_samples, make_loader, make_session, make_steps

    from gpudoctor.checks import gd101_workers, gd102_input_stall, gd103_cpu_saturation
    from gpudoctor.verdict.engine import run_checks

    session = make_session(
        steps=make_steps(50, 0.100, 0.070),
        # the loop waits 70 ms per step, making each batch itself: 70 ms a batch
        loaders=[make_loader(num_workers=0, batches=50, fetch_s_per_batch=0.07)],
        cpu_samples=make_cpu_samples(20, system_percent=98.0, main_thread_percent=99.0, tree_percent=190.0),
        usable_cores=2,
    )
    checks = [m.run.check for m in (gd101_workers, gd102_input_stall, gd103_cpu_saturation)]
    findings = {f.id: f for f in run_checks(session, checks).findings}
    assert {"GD101", "GD103"} <= set(findings)
    assert findings["GD101"].remedy is not None and findings["GD101"].remedy.knobs == {"num_workers": "more"}
    saturation = findings["GD103"].remedy
    assert saturation is not None and "Do not add workers" not in saturation.text
    assert "GD101" in findings["GD103"].message
    ways = {f.remedy.knobs.get("num_workers") for f in findings.values() if f.remedy is not None}
    assert ways - {None} == {"more"}
