"""The report's `--try` fields (schema gpudoctor.report/1, added fields only).

- ``overrides``: the remedies this run was asked to apply and what the agent applied
  (None for a plain run: nothing was changed);
- ``try``: what --try asked for and the bound every run shared;
- ``trials``: one entry per trial run (override, finding, predicted and measured gain,
  steady steps without/with, numerics_change, the trial's own report);
- ``untried``: findings whose remedy cannot be applied from outside the code, and why;
- ``findings[i].trial``: the finding's own line, "predicted 1.9x, measured 1.7x with
  num_workers=8", or why it was not tried.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpudoctor.session import Session
from gpudoctor.trials.records import TrialResult


def overrides_section(session: Session) -> dict[str, Any] | None:
    if session.overrides_requested is None and not session.overrides:
        return None
    return {"requested": session.overrides_requested,
            "applied": [dataclasses.asdict(o) for o in session.overrides]}




def _trial_dict(result: TrialResult) -> dict[str, Any]:
    data = dataclasses.asdict(result)
    data["finding"] = result.findings[0] if result.findings else None
    data["no_gain"] = result.measured_gain is not None and result.measured_gain < NO_GAIN
    data["text"] = finding_line(result, result.predicted_gain)
    return data


def finding_line(result: TrialResult, predicted: float | None) -> str:
    """'predicted 1.90x, measured 1.70x with num_workers=8' (and what a small number means)."""
    head = f"predicted {times(predicted)}" if predicted is not None else "no prediction"
    numerics = " (changes numerics)" if result.numerics_change else ""
    if result.status == "inconclusive":
        return f"{head}; the trial with {result.label}{numerics} was inconclusive: {result.why}"
    if result.measured_gain is None:
        return f"{head}; the trial with {result.label}{numerics} measured nothing: {result.why or result.status}"
    text = f"{head}, {measured_text(result.measured_gain)} with {result.label}{numerics}"
    if result.status != "measured" and result.why:
        text += f" ({result.why})"
    elif result.why:
        text += f"; {result.why}"
    return text


def attach(report: dict[str, Any], session: Session) -> None:
    """Add the --try fields to a finished report dict (in place)."""
    report["overrides"] = overrides_section(session)
    trials = session.trials
    report["try"] = {"requested": list(trials.requested), "bound": trials.bound} if trials is not None else None
    report["trials"] = [_trial_dict(r) for r in trials.results] if trials is not None else None
    report["untried"] = [dataclasses.asdict(u) for u in trials.untried] if trials is not None else None
    if trials is None:
        return
    untried = {u.subject: u.why for u in trials.untried}
    for finding in report.get("findings") or []:
        fid = finding.get("id")
        result = next((r for r in trials.results if fid in r.findings), None)
        if result is not None:
            predicted = finding.get("estimated_gain")
            finding["trial"] = {
                "name": result.name,
                "label": result.label,
                "predicted_gain": predicted,
                "measured_gain": result.measured_gain,
                "numerics_change": result.numerics_change,
                "status": result.status,
                "text": finding_line(result, predicted),
                "report": result.report,
            }
        elif fid in untried:
            finding["trial"] = {"name": None, "why": untried[fid], "text": f"not tried: {untried[fid]}"}


NO_GAIN = 1.05  # under this a measured difference is run-to-run noise (prediction.GAIN_WARNING's line)


def measured_text(measured: float | None) -> str:
    """'measured 1.70x', with what it means when it is no gain."""
    if measured is None:
        return "not measured"
    if measured < 1 / NO_GAIN:
        return f"measured {times(measured)}: slower"
    if measured < NO_GAIN:
        return f"measured {times(measured)}: no measurable gain (under {NO_GAIN}x)"
    return f"measured {times(measured)}"


def times(gain: float) -> str:
    """1.93 -> '1.93x', 14.58 -> '14.6x'."""
    return f"{gain:.2f}x" if gain < 10 else f"{gain:.1f}x"


def outcome_line(result: TrialResult) -> str:
    """One line per trial, for the terminal during the run."""
    head = f"trial {result.label}: "
    if result.status in ("measured", "failed") and result.measured_gain is not None:
        before, after = result.steps_per_s
        text = head + f"{after:.3g} vs {before:.3g} steps/s, {measured_text(result.measured_gain)}"
        if result.predicted_gain is not None:
            text += f" (predicted {times(result.predicted_gain)})"
        return text + (f"; {result.why}" if result.why else "")
    return head + ("inconclusive: " if result.status == "inconclusive" else "") + (result.why or result.status)
