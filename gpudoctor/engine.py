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

# root cause -> findings it explains (when the root is a warning or worse)
EXPLAINS: dict[str, tuple[str, ...]] = {
    "GD102": ("GD201", "GD202", "GD203"),
    "GD103": ("GD201", "GD202", "GD203"),
    "GD101": ("GD201", "GD202"),
    "GD104": ("GD201", "GD202"),
    "GD301": ("GD201", "GD202"),
    "GD302": ("GD201",),
    "GD303": ("GD201",),
    "GD401": ("GD402",),
}


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
    roots = {f.id for f in findings if severity_rank(f.severity) >= severity_rank("warning")}
    marked = []
    for f in findings:
        cause = next((r for r in sorted(roots) if r != f.id and f.id in EXPLAINS.get(r, ())), None)
        if cause and f.consequence_of is None:
            f = dataclasses.replace(f, consequence_of=cause)
        marked.append(f)

    def key(f: Finding) -> tuple:
        return (
            f.consequence_of is not None,
            f.severity == "info",
            f.stage,
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
