"""Session -> report (`judge`) and report -> files (`write`): the one tail every command ends with.

diagnose, report, analyze, merge, attach, the --try trials and the in-process watch all
judge with `judge(session, JudgeOptions(...))`: every installed check (plugins too; one
that failed to load is said once on stderr, by `load_catalog`, and shows as an `error`
outcome), the same report dict (schema gpudoctor.report/1). They all write with
`write(report, WritePlan(...))`: the formats planned, the Session and the gzip profiler
trace, with the same rules (gpudoctor.verdict.output: atomic, never overwriting, moved to `-N`
when a name is taken; with `elsewhere`, moved to ./gpudoctor-reports or the temporary
directory when the planned directory stopped taking files during a long run).

Nothing here reads argparse: the commands build JudgeOptions and WritePlan from their flags.
"""

from __future__ import annotations

import dataclasses
import gzip
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.model import Check, CheckOutcome
from gpudoctor.run.status import say
from gpudoctor.session import Session
from gpudoctor.verdict import output, registry
from gpudoctor.verdict.build import build_report
from gpudoctor.verdict.engine import EngineResult, run_checks
from gpudoctor.verdict.output import DEFAULT_DIR, OutputPaths, WrittenOutputs, shown
from gpudoctor.verdict.registry import PluginError

log = logging.getLogger(__name__)

# A predicate over checks: False means "cannot run here", with the reason given alongside
Runnable = Callable[[Check], bool]
# (report dict, format name) -> text: reports.render by default; analyze's helper process renders too
RenderFn = Callable[[Mapping[str, Any], str], str]


@dataclass(frozen=True)
class Catalog:
    """The installed checks, and the plugins that failed to load (each with why)."""

    checks: tuple[Check, ...]
    errors: tuple[PluginError, ...] = ()


def load_catalog() -> Catalog:
    """The installed checks, built-ins and plugins; each plugin that failed to load is said on
    stderr here (and becomes an `error` outcome in the report)."""
    checks, errors = registry.load_checks()
    for err in errors:
        say(f"gpudoctor: warning: check plugin {err.name} not loaded: {err.reason}")
    return Catalog(tuple(checks), tuple(errors))


@dataclass(frozen=True)
class JudgeOptions:
    """How a Session is judged."""

    ignore: tuple[str, ...] = ()  # check IDs or slugs the user silenced (--ignore), one name each
    catalog: Catalog | None = None  # the checks to run; None: the installed ones, loaded (and said) now
    # False for a check that cannot run here: it is not run, and is `skipped` with not_runnable_reason
    runnable: Runnable | None = None
    not_runnable_reason: str = ""
    # called once the checks ran, before the report is built from the Session; the report and
    # the Judgement follow the result it returns (--try runs its trials there: the report carries
    # what each measured, and a remedy measured without gain is demoted)
    before_report: Callable[[EngineResult], EngineResult] | None = None


class Judgement(NamedTuple):
    report: dict[str, Any]  # the report dict (schema gpudoctor.report/1); write() names its files
    result: EngineResult  # the engine's findings (ordered) and every check's outcome


def judge(session: Session, options: JudgeOptions | None = None) -> Judgement:
    """Run the checks on the Session and build the report dict."""
    options = options or JudgeOptions()
    catalog = options.catalog if options.catalog is not None else load_catalog()
    checks = list(catalog.checks)
    # --ignore takes IDs or slugs; the engine is handed IDs
    by_slug = {c.slug.lower(): c.id for c in checks}
    ids = [by_slug.get(i.strip().lower(), i.strip()) for i in options.ignore]
    chosen = [c for c in checks if options.runnable is None or options.runnable(c)]
    result = run_checks(session, chosen, ignore=ids, load_errors=catalog.errors)
    if len(chosen) < len(checks):
        left_out = [CheckOutcome(id=c.id, slug=c.slug, stage=c.stage, title=c.title, status="skipped",
                                 reason=options.not_runnable_reason) for c in checks if c not in chosen]
        outcomes = sorted([*result.outcomes, *left_out], key=lambda o: (o.slug == "plugin", o.id))
        result = EngineResult(findings=result.findings, outcomes=outcomes)
    if options.before_report is not None:
        result = options.before_report(result)
    docs = {c.id: c.doc.strip() for c in checks if c.doc and c.doc.strip()}
    report = build_report(session, result, slugs={c.id: c.slug for c in checks}, docs=docs)
    return Judgement(report, result)


@dataclass(frozen=True)
class WritePlan:
    """Where and what `write` puts beside a report."""

    paths: OutputPaths  # planned by output.plan_outputs (before a run, so it never ends with nowhere to write)
    session: Session | None = None  # saved beside the report, for `gpudoctor report`; None: not saved
    trace: bytes | None = None  # the gzip profiler trace, saved beside and named in the profile
    fail_on: str | None = None  # the --fail-on level (junit: which findings fail)
    # the planned directory stopped taking files (full, removed, read-only): write to
    # ./gpudoctor-reports or the temporary directory instead and say so (runs whose diagnosis
    # must never be lost for a path: diagnose, attach, the watch); False: the error is raised
    elsewhere: bool = False
    render: RenderFn | None = None  # None: gpudoctor.reports.render
    # (report dict, format name) -> True when it began rendering that format elsewhere, for `render` to take
    # once the rest is made (output.write_outputs)
    render_ahead: Callable[[Mapping[str, Any], str], bool] | None = None


def write(report: dict[str, Any], plan: WritePlan) -> WrittenOutputs:
    """Write the report set; what was written (the report as written names its files).

    Raises GpudoctorError: CANNOT_WRITE when no place took the files, OUTPUT_EXISTS when
    no free name was found."""
    session_dict = None
    trace = None
    session = plan.session
    if session is not None:
        if plan.trace is not None and plan.paths.trace is not None and session.profile is not None:
            _name_trace(report, session, plan.paths.trace.name)
            trace = plan.trace
        session_dict = session.to_dict()
    if not plan.elsewhere:
        return output.write_outputs(plan.paths, report, session_dict, trace_bytes=trace, fail_on=plan.fail_on,
                             render=plan.render, render_ahead=plan.render_ahead)
    return _write_anywhere(plan, report, session_dict, trace)


def _name_trace(report: dict[str, Any], session: Session, name: str) -> None:
    """The profile names its trace file (diagnose names it before judging; the watch's report
    was judged before it was saved)."""
    assert session.profile is not None
    session.profile.trace_file = name
    profile = (report.get("evidence") or {}).get("profile")
    if isinstance(profile, dict):
        profile["trace_file"] = name


def _write_anywhere(plan: WritePlan, report: dict[str, Any], session_dict: dict[str, Any] | None,
                    trace: bytes | None) -> WrittenOutputs:
    """Write the report set where planned; if that directory stopped taking files during
    the run, write it to ./gpudoctor-reports or the temporary directory instead and say so:
    the diagnosis of a long run is never lost for a path."""
    main = dataclasses.replace(plan.paths, json_copy=None)
    places = [main.directory]
    try:
        here: Path | None = Path(os.getcwd())
    except OSError:
        here = None  # the working directory was removed during the run: the temporary directory's
    candidates = [*([here / DEFAULT_DIR] if here is not None else []), Path(tempfile.gettempdir()) / DEFAULT_DIR]
    for candidate in candidates:
        if all(candidate != (p if p.is_absolute() or here is None else here / p) for p in places):
            places.append(candidate)
    first: GpudoctorError | None = None
    for directory in places:
        try:
            written = output.write_outputs(dataclasses.replace(main, directory=directory), report, session_dict,
                                    trace_bytes=trace, fail_on=plan.fail_on, render=plan.render,
                                    render_ahead=plan.render_ahead)
        except GpudoctorError as exc:
            if exc.code != exitcodes.CANNOT_WRITE:
                raise
            first = first or exc
            continue
        if first is not None:
            say(f"gpudoctor: warning: {first}; the reports were written to {shown(directory)} instead")
        copy = plan.paths.json_copy
        if copy is not None and "json" in written.files:
            try:
                data = written.files["json"].read_bytes()
                written.files["json_copy"] = output.write_json_copy(copy, data, plan.paths.force)
            except (GpudoctorError, OSError) as exc:
                say(f"gpudoctor: warning: the --json copy was not written: {exc}")
        return written
    assert first is not None
    raise first


def gzip_trace(trace: Path | None) -> bytes | None:
    """The profiler trace, compressed to be saved beside the report; None when unreadable (logged)."""
    if trace is None:
        return None
    try:
        return gzip.compress(trace.read_bytes(), compresslevel=6)
    except OSError as exc:
        log.warning("gpudoctor: the profiler trace could not be read: %s", exc)
        return None
