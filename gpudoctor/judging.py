"""Session -> report, and the report set on disk: the tail of `diagnose`, for its other callers.

`watch()` / `diagnose_fn()` and `attach` end like `diagnose`: every installed check
(plugins too; those that failed to load show as `error` outcomes), the same report
dict (schema gpudoctor.report/1), the same files (HTML, JSON, the Session, the gzip
profiler trace) written with the same rules (gpudoctor.output: atomic, never
overwriting, moved to `-N` or to ./gpudoctor-reports when the place is taken or gone).
"""

from __future__ import annotations

import datetime
import gzip
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gpudoctor.engine import EngineResult, run_checks
from gpudoctor.model import Check
from gpudoctor.registry import load_checks
from gpudoctor.report import build_report
from gpudoctor.session import Session

log = logging.getLogger(__name__)

# A predicate over checks: False means "cannot run here", with the reason given alongside
Runnable = Callable[[Check], bool]


def judge(session: Session, ignore: Iterable[str] = (), *, runnable: Runnable | None = None,
          not_runnable_reason: str = "") -> tuple[dict[str, Any], EngineResult]:
    """Run the checks on the Session and build the report dict.

    Checks for which `runnable` says False are not run; they are `skipped` with
    `not_runnable_reason` (attach: the agent-based checks)."""
    checks, errors = load_checks()
    by_slug = {c.slug.lower(): c.id for c in checks}
    ids = [by_slug.get(i.strip().lower(), i.strip()) for i in ignore]
    chosen = [c for c in checks if runnable is None or runnable(c)]
    result = run_checks(session, chosen, ignore=ids, load_errors=errors)
    if len(chosen) < len(checks):
        from gpudoctor.model import CheckOutcome

        left_out = [CheckOutcome(id=c.id, slug=c.slug, stage=c.stage, title=c.title, status="skipped",
                                 reason=not_runnable_reason) for c in checks if c not in chosen]
        outcomes = sorted([*result.outcomes, *left_out], key=lambda o: (o.slug == "plugin", o.id))
        result = EngineResult(findings=result.findings, outcomes=outcomes)
    docs = {c.id: c.doc.strip() for c in checks if c.doc and c.doc.strip()}
    report = build_report(session, result, slugs={c.id: c.slug for c in checks}, docs=docs)
    return report, result


def gzip_trace(trace: Path | None) -> bytes | None:
    if trace is None:
        return None
    try:
        return gzip.compress(trace.read_bytes(), compresslevel=6)
    except OSError as exc:
        log.warning("gpudoctor: the profiler trace could not be read: %s", exc)
        return None


def write_report_set(report: dict[str, Any], session: Session, out: str | None, stem: str, *,
                     formats: Iterable[str] = ("html", "json"), trace_bytes: bytes | None = None,
                     fail_on: str | None = None, force: bool = False) -> tuple[dict[str, Any], dict[str, Path]]:
    """Write the report set like diagnose does; the report as written and kind -> path.

    `out` is a directory or a file stem (None: ./gpudoctor-reports/<stem>-<time>). A
    name that is taken moves the set to `-N` rather than failing (unless `force`).
    Raises GpudoctorError when nothing could be written anywhere."""
    import dataclasses

    from gpudoctor import exitcodes
    from gpudoctor.exitcodes import GpudoctorError
    from gpudoctor.output import DEFAULT_DIR, plan_outputs
    from gpudoctor.pipeline import _save

    fmts = ["html", "json", *[f for f in formats if f not in ("html", "json")]]
    # force=True only skips plan_outputs' "already exists" refusal: the write itself never
    # overwrites unless asked, and moves to a free -N name instead
    try:
        plan = plan_outputs(out, stem, datetime.datetime.now(), fmts, force=True)
    except GpudoctorError as exc:
        if exc.code != exitcodes.CANNOT_WRITE or out is None:
            raise
        log.warning("gpudoctor: %s; writing the report to %s instead", exc, DEFAULT_DIR)
        plan = plan_outputs(None, stem, datetime.datetime.now(), fmts, force=True)
    plan = dataclasses.replace(plan, force=force)
    session_dict = session.to_dict()
    if trace_bytes is not None and plan.trace is not None and session.profile is not None:
        session.profile.trace_file = plan.trace.name
        session_dict = session.to_dict()
        profile = (report.get("evidence") or {}).get("profile")
        if isinstance(profile, dict):
            profile["trace_file"] = plan.trace.name
    else:
        trace_bytes = None
    written, failure = _save(plan, report, session_dict, trace_bytes, fail_on)
    if written is None:
        assert failure is not None
        raise failure
    return written.report, dict(written.files)
