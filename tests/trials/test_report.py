"""The --try fields of the report, and how each renderer shows them."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.reports import render
from gpudoctor.session import Session
from gpudoctor.trials.records import AppliedOverride, TrialResult, Trials, Untried
from gpudoctor.trials.report import finding_line, measured_text
from gpudoctor.verdict.build import build_report
from gpudoctor.verdict.engine import run_checks
from gpudoctor.verdict.registry import load_checks

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "h200" / "fp32_matmul.session.json"


def tf32_trial(measured: float | None) -> TrialResult:
    return TrialResult(name="tf32", label='float32_matmul_precision="high" (TF32)', override={"tf32": True},
                       findings=["GD304"], numerics_change=True, predicted_gain=7.30, measured_gain=measured,
                       steps_per_s=[4.0, 4.0 * measured if measured else None], steady_steps=[25, 25],
                       applied=[AppliedOverride("tf32", "float32_matmul_precision=high", "highest")],
                       report="run.trials/run.try-tf32.json")


def report_with(trials: Trials | None) -> dict:
    session = Session.load(FIXTURE)
    session.trials = trials
    checks, _ = load_checks()
    return build_report(session, run_checks(session, checks), docs={})


def test_a_plain_report_has_no_trials_and_no_overrides():
    report = report_with(None)
    assert report["overrides"] is None and report["trials"] is None and report["try"] is None
    assert all("trial" not in f for f in report["findings"])
    assert "Remedies tried" not in render(report, "terminal")


def test_each_finding_reads_predicted_then_measured_with_what_was_applied():
    report = report_with(Trials(requested=["auto"], bound="--steps 60", results=[tf32_trial(5.8)],
                                untried=[Untried("GD302", "the synchronising calls are in the code")]))
    [trial] = report["trials"]
    assert trial["finding"] == "GD304" and trial["predicted_gain"] == 7.30 and trial["measured_gain"] == 5.8
    assert trial["steady_steps"] == [25, 25] and trial["numerics_change"] is True
    gd304 = next(f for f in report["findings"] if f["id"] == "GD304")
    assert gd304["trial"]["text"] == ('predicted 7.30x, measured 5.80x with float32_matmul_precision="high" (TF32) '
                                      "(changes numerics)")
    assert report["untried"] == [{"subject": "GD302", "why": "the synchronising calls are in the code"}]
    assert report["try"] == {"requested": ["auto"], "bound": "--steps 60"}
    text = render(report, "terminal")
    assert "Remedies tried (--try auto; every run --steps 60)" in text and "measured 5.80x" in text
    assert "GD302 not tried: the synchronising calls are in the code" in text
    markdown = render(report, "markdown")
    assert "| GD304 | predicted 7.30x, measured 5.80x" in markdown
    html = render(report, "html")
    assert "Tried (--try): predicted 7.30x, measured 5.80x" in html
    assert 'href="run.trials/run.try-tf32.html"' in html


def test_a_remedy_under_1_05x_says_so_plainly():
    assert measured_text(1.02) == "measured 1.02x: no measurable gain (under 1.05x)"
    assert measured_text(0.8) == "measured 0.80x: slower"
    assert measured_text(1.7) == "measured 1.70x"
    assert "no measurable gain" in finding_line(tf32_trial(1.01), 7.30)
    report = report_with(Trials(requested=["auto"], bound="--steps 60", results=[tf32_trial(1.01)]))
    assert report["trials"][0]["no_gain"] is True


def test_a_trial_that_measured_nothing_says_why():
    trial = tf32_trial(None)
    trial.status, trial.why = "failed", "the workload exited with code 1"
    assert finding_line(trial, 7.30) == ('predicted 7.30x; the trial with float32_matmul_precision="high" (TF32) '
                                         "(changes numerics) measured nothing: the workload exited with code 1")


def test_a_trial_report_lists_the_overrides_it_applied():
    session = Session.load(FIXTURE)
    session.overrides_requested = {"tf32": True}
    session.overrides = [
        AppliedOverride(
            "tf32",
            "float32_matmul_precision=high",
            "float32_matmul_precision=highest",
            "torch.set_float32_matmul_precision",
        ),
        AppliedOverride("tf32", True, where="held", note="the workload set allow_tf32 = False; kept True"),
    ]
    checks, _ = load_checks()
    report = build_report(session, run_checks(session, checks), docs={})
    assert report["overrides"]["requested"] == {"tf32": True}
    assert len(report["overrides"]["applied"]) == 2
    text = render(report, "terminal")
    assert "Overrides applied in this run" in text
    assert "tf32 held: the workload set allow_tf32 = False; kept True" in text
    assert "Overrides applied in this run" in render(report, "html")
