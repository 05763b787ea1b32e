"""The engine: run the checks on a Session, order findings the way an expert triages.

Ordering follows the playbook: root causes before their consequences, problems
before notes, then playbook stage (input pipeline, GPU/batch, kernels, memory),
then estimated gain. When an upstream finding explains a downstream one (a starved
loader explains idle SMs and makes "use a bigger batch" premature), the downstream
finding is kept but marked as a consequence, never shouted as a second root cause.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Iterable

from gpudoctor.model import Check, CheckOutcome, Finding, Skip, severity_rank
from gpudoctor.session import Session

log = logging.getLogger(__name__)

# root cause -> findings it explains (when the root is a warning or worse). Order
# matters: when several roots explain a finding, the first one listed is named.
EXPLAINS: dict[str, tuple[str, ...]] = {
    # a starved loader makes idle SMs, a "bigger batch" and slow clocks beside the point
    "GD102": ("GD201", "GD202", "GD203", "GD103"),
    "GD103": ("GD201", "GD202", "GD203"),
    "GD101": ("GD201", "GD202"),
    "GD104": ("GD201", "GD202"),
    # pageable copies keep the main thread busy staging data, and the SMs idle
    "GD105": ("GD103", "GD201"),
    "GD303": ("GD103", "GD201"),
    # playbook: raise the batch first; tiny kernels are what a tiny batch looks like
    "GD202": ("GD301", "GD201"),
    "GD301": ("GD201",),
    "GD302": ("GD201",),
    # an OOM comes with allocation retries: they are its symptom, GD402 says the cause
    "GD402": ("GD401", "GD202"),
}


def _explains(root: Finding, finding: Finding) -> bool:
    if finding.id not in EXPLAINS.get(root.id, ()):
        return False
    if root.id == "GD102" and finding.id == "GD103":
        # with num_workers=0 the main thread *is* the loader: its pegged core is the stall itself;
        # saturated cores (other processes, too many workers) stay a root cause of their own
        saturation = finding.evidence.get("saturation")
        return saturation is not None and saturation.value == "main-thread"
    return True


@dataclass(frozen=True)
class EngineResult:
    findings: list[Finding]
    outcomes: list[CheckOutcome]


def run_checks(session: Session, checks: Iterable[Check], ignore: Iterable[str] = ()) -> EngineResult:
    ignored = {i.strip().upper() for i in ignore}
    findings: list[Finding] = []
    outcomes: list[CheckOutcome] = []
    for check in checks:
        base = dict(id=check.id, slug=check.slug, stage=check.stage, title=check.title)
        if check.id.upper() in ignored or check.slug.upper() in ignored:
            outcomes.append(CheckOutcome(**base, status="skipped", reason="ignored (--ignore)"))
            continue
        missing = [(fact, session.fact(fact)) for fact in check.requires if session.fact(fact)]
        if missing:
            fact, reason = missing[0]
            outcomes.append(CheckOutcome(**base, status="skipped", reason=f"{fact}: {reason}"))
            continue
        try:
            produced = list(check.run(session))
        except Skip as skip:
            outcomes.append(CheckOutcome(**base, status="skipped", reason=str(skip)))
            continue
        except Exception as exc:  # a broken check is reported, never fatal
            log.exception("check %s failed", check.id)
            outcomes.append(
                CheckOutcome(**base, status="error", reason=f"check failed: {type(exc).__name__}: {exc}")
            )
            continue
        stamped = [dataclasses.replace(f, id=check.id, stage=check.stage) for f in produced]
        findings.extend(stamped)
        outcomes.append(CheckOutcome(**base, status="finding" if stamped else "pass"))
    return EngineResult(findings=order(findings), outcomes=outcomes)


def order(findings: list[Finding]) -> list[Finding]:
    roots = {f.id: f for f in findings if severity_rank(f.severity) >= severity_rank("warning")}
    preference = list(EXPLAINS)
    marked = []
    for f in findings:
        causes = [r for r in preference if r in roots and r != f.id and _explains(roots[r], f)]
        # name a root cause over a root that is itself a consequence (GD105 -> GD103 -> GD201)
        causes.sort(key=lambda r: any(_explains(roots[o], roots[r]) for o in roots if o != r))
        if causes and f.consequence_of is None:
            f = dataclasses.replace(f, consequence_of=causes[0])
        marked.append(f)

    def key(f: Finding) -> tuple:
        return (
            f.consequence_of is not None,
            f.severity == "info",
            0 if f.ended_run else f.stage,  # a crash comes first, whatever stage its check has
            -(f.estimated_gain or 1.0),
            -severity_rank(f.severity),
            f.id,
        )

    return sorted(marked, key=key)


def exit_status(workload_exit: int | None, findings: list[Finding], fail_on: str | None) -> int:
    """gpudoctor's exit code: the workload's, unless --fail-on trips on a clean run."""
    from gpudoctor import exitcodes

    code = workload_exit if workload_exit is not None else exitcodes.WORKLOAD_UNKNOWN
    if code == 0 and fail_on:
        threshold = severity_rank(fail_on)
        if any(severity_rank(f.severity) >= threshold for f in findings):
            return exitcodes.FAIL_ON
    return code
