"""What the engine ranks findings by: one gain per finding, one number per remedy, measured over predicted.

- **The biggest gain leads.** Findings are ordered by their gain; the playbook's stage
  order (input pipeline first) breaks near-ties only: gains within ``NEAR_TIE`` of the
  largest left (10%, twice the run-to-run noise a trial tells apart, trials.report.NO_GAIN)
  are one tie, ordered by stage.
- **One number per remedy.** Findings whose remedies make the same change (``Remedy.knobs``
  the same way: GD101 and GD102 both add workers) show one prediction: the best-founded
  one (a replay of the measured timeline over a bound over a rule; then the check that
  sizes the knob, ``Check.owns``; then the smaller gain), the others' own estimates
  said as cross-checks.
- **Measured beats predicted.** A finding whose ``--try`` trial measured its remedy under
  ``NO_GAIN`` (1.05x) is no longer critical, ranks by what was measured, and says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from gpudoctor.model import Check, Finding, severity_rank

if TYPE_CHECKING:
    from gpudoctor.session import TrialResult, Trials

NEAR_TIE = 1.10  # gains within 10% of each other are a tie the stage order breaks
NO_GAIN = 1.05  # a trial under this measured no gain (run-to-run noise; trials.report.NO_GAIN)
METHOD_RANK = {"replay": 3, "bound": 2, "rule": 1}  # how well founded a prediction is


def gain_of(f: Finding) -> float:
    """What a finding is ranked by: its trial's measured gain when one demoted it, else its prediction."""
    if f.measured_gain is not None:
        return f.measured_gain
    return f.estimated_gain if f.estimated_gain is not None else 1.0


def by_gain(findings: Iterable[Finding], last: Collection[str] = ()) -> list[Finding]:
    """Largest gain first; a near-tie (within NEAR_TIE of the largest left) in stage order. The
    findings of the checks in `last` (symptoms whose number is a bound, not a remedy's) follow the
    others, in the same order among themselves."""
    pool = list(findings)
    if last:
        return by_gain(f for f in pool if f.id not in last) + by_gain(f for f in pool if f.id in last)
    left = sorted(pool, key=lambda f: (-gain_of(f), f.stage, -severity_rank(f.severity), f.id))
    ordered: list[Finding] = []
    while left:
        top = gain_of(left[0])
        tie = [f for f in left if gain_of(f) * NEAR_TIE >= top]
        tie.sort(key=lambda f: (f.stage, -gain_of(f), -severity_rank(f.severity), f.id))
        ordered.extend(tie)
        left = [f for f in left if all(f is not t for t in tie)]
    return ordered


def clearly_larger(finding: Finding, root: Finding) -> bool:
    """Does `finding` promise clearly more (beyond a near-tie) than `root` does? Then removing the
    root cannot remove it: a cause that buys 1.2x does not explain one that predicts 1.8x. Only
    a prediction of a remedy counts (a bound, GD201's 1 / busy share, is the idle GPU itself)."""
    prediction = finding.prediction
    if prediction is None or prediction.method == "bound" or finding.estimated_gain is None:
        return False
    return finding.estimated_gain > NEAR_TIE * gain_of(root)


def one_number_per_remedy(findings: list[Finding], checks: Mapping[str, Check]) -> list[Finding]:
    """Findings advising the same change on a knob share the best-founded prediction of it."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(findings):
        for knob, way in (f.remedy.knobs.items() if f.remedy is not None else ()):
            if way != "keep" and f.prediction is not None:
                groups.setdefault((knob, way), []).append(i)
    out = list(findings)
    for (knob, _), members in groups.items():
        if len(members) < 2:
            continue

        ranked = sorted(((_founded(findings[i], knob, checks), -i) for i in members), reverse=True)
        leader = findings[-ranked[0][1]]
        assert leader.prediction is not None
        for i in members:
            f = out[i]
            if f.id == leader.id or f.prediction is None:
                continue
            own = f.prediction
            if abs(own.gain - leader.prediction.gain) < 0.005 and own.method == leader.prediction.method:
                continue
            check = (f" (One number per remedy: {leader.id}'s prediction for {knob}, {leader.prediction.gain:.2f}x "
                     f"{leader.prediction.label} ({leader.prediction.method}); this check's own estimate, "
                     f"{own.gain:.2f}x {own.label} ({own.method}), is its cross-check.)")
            out[i] = dataclasses.replace(f, prediction=leader.prediction, estimated_gain=leader.estimated_gain,
                                         message=f.message + check)
    return out


def _founded(f: Finding, knob: str, checks: Mapping[str, Check]) -> tuple[int, bool, float]:
    """How well founded a finding's prediction of a change on `knob` is: its method, whether the
    check sizes that knob, then the smaller gain (the cautious one)."""
    method = f.prediction.method if f.prediction is not None else ""
    return METHOD_RANK.get(method, 0), knob in getattr(checks.get(f.id), "owns", ()), -(f.estimated_gain or 1.0)


def measured_over_predicted(findings: list[Finding], trials: Trials | None) -> list[Finding]:
    """A finding whose trial measured no gain is demoted (never critical) and ranks by the measurement."""
    if trials is None:
        return findings
    out = []
    for f in findings:
        result = _conclusive_trial(f, trials.results)
        if result is None or result.measured_gain is None or result.measured_gain >= NO_GAIN:
            out.append(f)
            continue
        severity = "warning" if f.severity == "critical" else f.severity
        note = (f" Measured: the trial with {result.label} ran {result.measured_gain:.2f}x as fast as the run "
                f"without it, under {NO_GAIN}x: the predicted {f.estimated_gain or 1.0:.2f}x did not hold"
                + (", so this is no longer critical." if f.severity == "critical" else "."))
        out.append(dataclasses.replace(f, severity=severity, message=f.message + note,
                                       measured_gain=result.measured_gain, measured_with=result.label))
    return out


def _conclusive_trial(f: Finding, results: Iterable[TrialResult]) -> TrialResult | None:
    return next((r for r in results if f.id in r.findings and r.status == "measured"), None)
