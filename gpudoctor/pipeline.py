"""diagnose = plan outputs -> run under the supervisor -> checks -> engine -> reports -> exit code.

Outputs are planned (and the directory's writability checked) before the workload
starts, so a long run never ends with nowhere to write its diagnosis.
"""

from __future__ import annotations

import dataclasses
import datetime
import gzip
import logging
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.reports.formats import with_defaults
from gpudoctor.run.process_tree import none_instrumented
from gpudoctor.run.status import say as say_line
from gpudoctor.run.supervisor import RunOptions, Supervisor
from gpudoctor.run.workdir import LaunchError
from gpudoctor.session import Session
from gpudoctor.trials.remedies import TryRequest
from gpudoctor.verdict.engine import EngineResult, exit_status, gate_line, with_trials
from gpudoctor.verdict.judge import JudgeOptions, WritePlan, judge, load_catalog, write
from gpudoctor.verdict.output import OutputPaths, WrittenOutputs, plan_outputs, shown

if TYPE_CHECKING:
    from gpudoctor.trials.scratch import Listing, Workspace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Misplaced:
    """gpudoctor's own options written after the script (`diagnose train.py --duration 10`)."""

    options: list[str]  # as written, with their values
    suggestion: str  # the command line with them before the script


# receives the finished report and the files written (kind -> path), e.g. preflight's policy
ReportSink = Callable[[dict[str, Any], dict[str, str]], None]
# argparse, click and absl exit with 2 when they reject their arguments
USAGE_ERROR_EXIT = 2


@dataclass(frozen=True)
class ReportOptions:
    """How diagnose judges and writes its report (the command builds it from its flags)."""

    out: str | None = None  # --out: a directory or a file stem (None: ./gpudoctor-reports/<stem>-<time>)
    json_path: str | None = None  # --json: one more copy of the JSON report
    formats: tuple[str, ...] = ()  # --format: files beside the HTML and JSON (always written)
    ignore: tuple[str, ...] = ()  # --ignore: check IDs or slugs, one each
    fail_on: str | None = None  # --fail-on
    force: bool = False  # --force: overwrite existing report files
    quiet: bool = False  # --quiet: no summary on stderr (the files are still written)


@dataclass(frozen=True)
class DiagnoseRequest:
    """One `diagnose`: what to run and measure, and what to write about it."""

    run: RunOptions  # the command and how it is measured (the report directory is added as scratch)
    stem: str  # the report files' name, e.g. "train"
    report: ReportOptions = ReportOptions()
    trials: TryRequest | None = None  # --try / --try-only: re-run once per remedy (None: no trials)
    try_in_place: bool = False  # --try-in-place: the trials run in the working directory itself


def diagnose_and_report(request: DiagnoseRequest, *, on_report: ReportSink | None = None,
                        misplaced: Misplaced | None = None) -> int:
    """`on_report` receives the finished report (preflight's policy); `misplaced`: gpudoctor's own
    options found after the script (they went to it)."""
    trial_request, run = request.trials, request.run
    if trial_request is not None and run.duration_s is None and run.max_steps is None:
        run = dataclasses.replace(run, duration_s=DEFAULT_TRY_DURATION_S)
        say_line(f"gpudoctor: --try runs the workload once more per remedy, each under the same bound; none was "
                 f"given, so every run stops after --duration {DEFAULT_TRY_DURATION_S:g} (set --steps or --duration)")
    report = request.report
    plan = absolute(plan_outputs(report.out, request.stem, datetime.datetime.now(), with_defaults(report.formats),
                                 force=report.force, json_path=report.json_path))
    options = dataclasses.replace(run, scratch_dirs=[str(plan.directory)])
    before: Listing | None = None
    if trial_request is not None:
        from gpudoctor.trials import scratch

        options.record_writes = True
        before = None if request.try_in_place else scratch.before_run(os.getcwd(), [str(plan.directory)])
    try:
        supervisor = Supervisor(options)
    except LaunchError as exc:
        raise GpudoctorError(str(exc), exc.code) from None
    try:
        result = supervisor.run()
    except LaunchError as exc:
        supervisor_cleanup(supervisor)
        raise GpudoctorError(str(exc), exc.code) from None
    try:
        session = result.session
        if misplaced:
            _misplaced_options(session, misplaced)
        never_ran = failed_before_running(session)
        if never_ran:
            raise GpudoctorError(never_ran, exitcodes.NOT_RUNNABLE)
        if not supervisor.reader.processes:
            say_line(f"gpudoctor: {none_instrumented(supervisor.uninstrumented)}; "
                     "the report covers CPU/GPU sampling only")
        elif supervisor.uninstrumented:
            say_line(f"gpudoctor: {len(supervisor.uninstrumented)} Python process(es) of the command ran without the "
                 "agent (PYTHONPATH or the environment replaced); the report says which")
        _announce_end(session, supervisor.escalated,
                      then="trying the remedies" if trial_request is not None else None)
        trials = None
        if trial_request is not None:
            from gpudoctor.trials import scratch

            space = None if before is None else scratch.workspace(supervisor.cwd, before, supervisor.reader.writes,
                                                                  [str(plan.directory)])
            trials = TrialContext(trial_request, options, space)
        return finish(
            session,
            report,
            plan,
            trace=result.trace_path,
            stopped_by_us=session.stop_reason in ("duration", "steps"),
            on_report=on_report,
            trials=trials,
        )
    finally:
        result.cleanup()


DEFAULT_TRY_DURATION_S = 60.0  # --try with neither --steps nor --duration: every run gets this bound


@dataclass(frozen=True)
class TrialContext:
    """`--try`: what was asked, and the options the diagnosed run had (each trial reuses them)."""

    request: TryRequest
    options: RunOptions
    workspace: Workspace | None  # None: --try-in-place, the trials run in the working directory


def absolute(plan: OutputPaths) -> OutputPaths:
    """The plan with its paths made absolute now: the workload may remove or leave the
    directory gpudoctor started from, and the report must still land where --out said."""
    import dataclasses

    return dataclasses.replace(plan, directory=plan.directory.absolute(),
                               json_copy=plan.json_copy.absolute() if plan.json_copy is not None else None)


def _misplaced_options(session: Session, misplaced: Misplaced) -> None:
    """The script rejected its arguments (exit 2 before any step) and they hold gpudoctor's
    own options: a usage error of gpudoctor's (exit 64, one line, no report written). Any
    other outcome is the script's own: its report is written, with a note on stderr."""
    options = " ".join(misplaced.options)
    if session.exit_code == USAGE_ERROR_EXIT and session.steps.count == 0:
        raise GpudoctorError(f"the script rejected its arguments (exit code 2), which hold gpudoctor's own {options}: "
                             f"gpudoctor's options go before the script: {misplaced.suggestion}", exitcodes.USAGE)
    say_line(f"gpudoctor: note: {options} after the script went to the script; gpudoctor's options go before it: "
             f"{misplaced.suggestion}")


# Python's own refusal of the source: the script (or what it imports first) never ran
_DID_NOT_COMPILE = ("SyntaxError", "IndentationError", "TabError")


def failed_before_running(session: Session) -> str | None:
    """One line when the workload's main script did not compile: it never ran, nothing was
    measured, and a report of 19 skipped checks would say less than Python's error."""
    if session.steps.count or session.loaders or session.profile is not None:
        return None
    mains = {p.pid for p in session.processes if p.role == "main"}
    error = next((e for e in session.errors if e.kind == "exception" and e.type in _DID_NOT_COMPILE
                  and e.pid in mains), None)
    if error is None:
        return None
    from gpudoctor.base.text import one_line

    return (f"the script failed before it ran: {error.type}: {one_line((error.message or '').strip())[:300]}; "
            "nothing was measured, so no report was written")


def supervisor_cleanup(supervisor: Supervisor) -> None:
    shutil.rmtree(supervisor.workdir, ignore_errors=True)


def _announce_end(session: Session, escalated: list[str] | None = None, then: str | None = None) -> None:
    code = session.exit_code
    reason = session.stop_reason
    failed = code not in (0, None)
    crash = next((e for e in session.errors if e.kind in ("exception", "oom")), None) if failed else None
    if reason == "duration":
        what = "stopped after --duration"
    elif reason == "steps":
        what = "stopped after --steps"
    elif reason == "interrupted":
        what = "interrupted (Ctrl-C)"
    elif reason == "terminated":
        what = "terminated (SIGTERM to gpudoctor)"
    elif code is not None and code > 128:
        what = f"killed by signal {code - 128}"
    elif crash is not None:
        what = f"crashed: {crash.type}: {crash.message.splitlines()[0][:160] if crash.message else ''}"
    else:
        what = f"exited with code {code}"
    if escalated and code in (137, 143):
        what += f" (it ignored SIGINT: ended by {'SIGKILL' if code == 137 else 'SIGTERM'})"
    from gpudoctor.base.text import printable

    # the exception's type and text come from the workload: no terminal controls of theirs
    say_line(printable(f"gpudoctor: workload {what} after {session.duration_s:.1f}s; {then or 'writing the report'}"))


def finish(session: Session, options: ReportOptions, plan: OutputPaths, *, trace: Path | None = None,
           stopped_by_us: bool = False, on_report: ReportSink | None = None,
           trials: TrialContext | None = None) -> int:
    """Run the checks on a Session, write every report, print the summary, return the exit code.
    With `trials` (--try), re-run the workload once per applicable remedy first (the report
    then carries what each measured)."""
    trace_bytes = None
    if trace is not None and plan.trace is not None and session.profile is not None:
        try:
            trace_bytes = gzip.compress(trace.read_bytes(), compresslevel=6)
            session.profile.trace_file = plan.trace.name  # before judging: every window of the report names it
        except OSError as exc:
            session.notes.append(f"the profiler trace could not be saved: {exc.strerror or exc}")
    catalog = load_catalog()  # once: the trials are judged by the same checks
    judging = JudgeOptions(ignore=options.ignore, catalog=catalog)
    refused = trials is not None and trials.workspace is not None and trials.workspace.refusal()

    def try_remedies(engine: EngineResult) -> EngineResult:
        if refused:
            say_line(f"gpudoctor: {refused}")
            session.notes.append(refused)
        elif trials is not None:
            from gpudoctor.trials.runner import run_trials

            try:
                session.trials = run_trials(session, engine.findings, trials.request, trials.options, plan, judging,
                                            force=options.force, workspace=trials.workspace)
                engine = with_trials(engine, session, catalog.checks)  # a remedy measured without gain is demoted
            except Exception as exc:
                log.debug("--try failed", exc_info=True)
                session.notes.append(f"--try stopped on an internal error: {type(exc).__name__}: {exc}")
        return engine

    report, engine = judge(session, dataclasses.replace(judging, before_report=try_remedies)
                           if trials is not None else judging)
    written: WrittenOutputs | None = None
    failure: GpudoctorError | None = None
    try:
        written = write(report, WritePlan(plan, session=session, trace=trace_bytes, fail_on=options.fail_on,
                                          elsewhere=True))
    except GpudoctorError as exc:
        if exc.code != exitcodes.CANNOT_WRITE:
            raise
        failure = exc  # nowhere took the files: the summary still shows the diagnosis, then the error
    if on_report is not None:
        on_report(written.report if written else report,
                  {k: str(v) for k, v in written.files.items()} if written else {})
    if not options.quiet:
        show_summary(written.report if written else report, {k: shown(v) for k, v in written.files.items()}
                     if written else {})
    if failure is not None:
        raise failure
    workload = session.exit_code
    if stopped_by_us and (workload in (130, 143, 137, -2, -15) or session.interrupted_by_gpudoctor
                          or not session.crashes_before_stop()):
        # the workload ended because gpudoctor asked it to (documented), whatever the signal became: a
        # KeyboardInterrupt that lands inside torch's C++ (a CUDA backward pass, measured on an H200) can
        # exit with 1, not 130; torchrun turns it into its SignalException and exits 1
        workload = 0
    measured = report["summary"].get("measured", True)
    code = exit_status(workload, engine.findings, options.fail_on, measured=measured)
    if code == exitcodes.FAIL_ON:
        say_line(gate_line(engine.findings, options.fail_on, measured))  # even with --quiet: why the gate failed
    return exitcodes.TRY_REFUSED if refused and code == 0 else code


def show_summary(report: dict[str, Any], written: dict[str, str]) -> None:
    """The terminal summary on stderr; a closed or full stderr costs nothing (the files hold the diagnosis)."""
    from gpudoctor.reports import terminal

    try:
        terminal.show_summary(report, sys.stderr, written=written)
    except (OSError, ValueError):
        pass
