"""Re-run the workload once per remedy, under the same bounds, and measure what each bought.

Measured gain = steady steps/s of the trial run / steady steps/s of the run without
the remedy (the diagnosed run), both from the same machinery (metrics.step_summary:
warm-up and profiled steps left out, and the steps the loader's prefetch queue may have
fed), over the same phase and enough steps to drain that queue several times; else the
trial is "inconclusive", with why (gpudoctor.trials.trust). Each trial run gets its own full report, kept
in ``<stem>.trials/`` beside the main one as ``<stem>.try-<remedy>.{html,json,session.json}``.
Each trial runs in a fresh scratch working directory (gpudoctor/trials/scratch.py), with
no stdin, unless --try-in-place asked for the user's working directory.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from gpudoctor import metrics
from gpudoctor.model import Finding, severity_rank
from gpudoctor.run.status import say
from gpudoctor.run.supervisor import RunOptions, Supervisor
from gpudoctor.run.workdir import LaunchError
from gpudoctor.session import Session
from gpudoctor.trials.plan import TrialPlan, plan_trials
from gpudoctor.trials.records import TrialResult, Trials
from gpudoctor.trials.remedies import TryRequest
from gpudoctor.trials.report import outcome_line
from gpudoctor.trials.scratch import SHOWN, Workspace
from gpudoctor.trials.trust import after_queue, inconclusive, prefetch_queue
from gpudoctor.verdict.judge import JudgeOptions, WritePlan, judge, write
from gpudoctor.verdict.output import DEFAULT_FORMATS, OutputPaths, plan_outputs

log = logging.getLogger(__name__)

COMPILE_ALLOWANCE_S = 60.0  # added to --duration for a compile trial (compilation is not a steady step)


def bound_text(options: RunOptions) -> str:
    parts = []
    if options.max_steps is not None:
        parts.append(f"--steps {options.max_steps}")
    if options.duration_s is not None:
        parts.append(f"--duration {options.duration_s:g}")
    return " ".join(parts) or "no bound (each run to its end)"


def run_trials(session: Session, findings: Sequence[Finding], request: TryRequest, options: RunOptions,
               main: OutputPaths, judging: JudgeOptions, *, force: bool = False,
               workspace: Workspace | None = None) -> Trials:
    """Run every planned trial; the diagnosed run (`session`) is the baseline. Never raises for a
    trial that fails to start or crashes: that is its result. `judging`: how the diagnosed run was
    judged (its checks and --ignore), each trial is judged alike. `workspace`: where the diagnosed
    run wrote (each trial runs in a scratch copy); None runs them in the working directory."""
    judging = dataclasses.replace(judging, before_report=None)  # the diagnosed run's hook is not a trial's
    plans, untried = plan_trials(session, list(findings), request,
                                 judging.catalog.checks if judging.catalog is not None else None)
    trials = Trials(requested=request.requested, bound=bound_text(options), untried=untried)
    if not plans:
        say("gpudoctor: --try: no remedy for this run's findings can be applied from outside the code")
        return trials
    folder = main.directory / f"{main.stem}.trials"
    say(f"gpudoctor: --try: {len(plans)} trial run(s), each under {trials.bound}; reports in {folder}")
    say(_where(workspace))
    stems: set[str] = set()
    interrupted = False
    for index, plan in enumerate(plans, 1):
        if interrupted:
            trials.results.append(_result(plan, session, None, status="interrupted", why="not run: interrupted"))
            continue
        stem = _stem(main.stem, plan.name, stems)
        say(f"gpudoctor: trial {index}/{len(plans)}: {plan.label}"
            + (f" (for {', '.join(plan.findings)})" if plan.findings else " (asked for)"))
        try:
            result = _run_one(plan, session, options, folder, stem, judging, force, workspace)
        except KeyboardInterrupt:
            result = _result(plan, session, None, status="interrupted", why="interrupted (Ctrl-C)")
        if result.status == "interrupted":
            interrupted = True
        leaked = workspace.leaked() if workspace is not None else []
        if leaked:  # a write no scratch directory contained: no further trial
            shown = ", ".join(leaked[:SHOWN]) + (f" and {len(leaked) - SHOWN} more" if len(leaked) > SHOWN else "")
            say(f"gpudoctor: warning: trial {plan.name} changed files in {workspace.cwd if workspace else '.'}: "
                f"{shown}; the remaining trials are not run")
            result.why = f"it changed files of the working directory: {shown}"
            interrupted = True
        trials.results.append(result)
        say("gpudoctor: " + outcome_line(result))
    return trials


def _where(workspace: Workspace | None) -> str:
    if workspace is None:
        return ("gpudoctor: --try-in-place: the trials run in your working directory, with no stdin: what they "
                "write there changes your files")
    copied = len(workspace.inside)
    return (f"gpudoctor: --try: each trial runs in a scratch copy of {workspace.cwd} (links to your files"
            + (f"; the {copied} file(s) this run wrote are copied" if copied else "")
            + "), with no stdin; your files stay as this run left them")


def _stem(main_stem: str, name: str, taken: set[str]) -> str:
    stem, n = f"{main_stem}.try-{name}", 1
    while stem in taken:
        n += 1
        stem = f"{main_stem}.try-{name}-{n}"
    taken.add(stem)
    return stem


def _run_one(plan: TrialPlan, baseline: Session, options: RunOptions, folder: Path, stem: str,
             judging: JudgeOptions, force: bool, workspace: Workspace | None) -> TrialResult:
    try:
        paths = plan_outputs(str(folder / stem), stem, datetime.datetime.now(), DEFAULT_FORMATS, force=force,
                             trace=False)
    except Exception as exc:  # noqa: BLE001  (a trial that cannot write still says why)
        return _result(plan, baseline, None, status="failed", why=f"its report cannot be written: {exc}")
    trial_options = dataclasses.replace(
        options, overrides=dict(plan.override), env=dict(plan.override.get("env") or {}), scratch_dirs=[str(folder)]
    )
    trial_options.stdin_devnull = True
    trial_options.record_writes = False
    scratch = None
    if workspace is not None:
        try:
            scratch = workspace.make()
        except OSError as exc:
            return _result(plan, baseline, None, status="failed", why=f"no scratch directory: {exc.strerror or exc}")
        trial_options.cwd, trial_options.protect_writes, trial_options.record_writes = (
            str(scratch), workspace.cwd, True)
    try:
        return _supervised(plan, baseline, trial_options, options, folder, paths, stem, judging)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _supervised(plan: TrialPlan, baseline: Session, trial_options: RunOptions, options: RunOptions, folder: Path,
                paths: OutputPaths, stem: str, judging: JudgeOptions) -> TrialResult:
    if plan.name == "compile" and options.duration_s is not None:
        # compiling takes its time before the first compiled step: steady steps are counted after
        # it, so it gets that long on top of the shared bound rather than fewer steady steps
        trial_options.duration_s = options.duration_s + COMPILE_ALLOWANCE_S
    try:
        supervisor = Supervisor(trial_options)
        run = supervisor.run()
    except LaunchError as exc:
        return _result(plan, baseline, None, status="failed", why=str(exc))
    try:
        trial = run.session
        trial.overrides_requested = dict(plan.override)
        report, engine = judge(trial, judging)
        written = None
        try:
            written = write(report, WritePlan(paths, session=trial))
        except Exception as exc:  # noqa: BLE001 (the trial's result is still recorded)
            log.warning("the report of trial %s was not written: %s", stem, exc)
        result = _result(plan, baseline, trial)
        result.verdict = report["summary"].get("verdict")
        result.remaining = [
            f.id for f in engine.findings if f.consequence_of is None and severity_rank(f.severity) >= 1
        ]
        if written is not None and "json" in written.files:
            result.report = f"{folder.name}/{written.files['json'].name}"
        return result
    finally:
        run.cleanup()


def _result(
    plan: TrialPlan, baseline: Session, trial: Session | None, *, status: str | None = None, why: str | None = None
) -> TrialResult:
    # each run's steps/s without the steady steps its prefetch queue may have fed (trials.trust)
    before = metrics.step_summary(after_queue(baseline, prefetch_queue(baseline)))
    after = metrics.step_summary(after_queue(trial, prefetch_queue(trial))) if trial is not None else None
    result = TrialResult(
        name=plan.name,
        label=plan.label,
        override=dict(plan.override),
        findings=list(plan.findings),
        numerics_change=plan.numerics_change,
        predicted_gain=round(plan.predicted_gain, 3) if plan.predicted_gain is not None else None,
        steps_per_s=[_round(before.steps_per_s if before else None), _round(after.steps_per_s if after else None)],
        steady_steps=[before.count if before else 0, after.count if after else 0],
    )
    if trial is None:
        result.status, result.why = status or "failed", why
        return result
    result.applied = list(trial.overrides)
    result.exit_code, result.stop_reason = trial.exit_code, trial.stop_reason
    result.duration_s = round(trial.duration_s, 3)
    if before is not None and after is not None and before.steps_per_s > 0:
        result.measured_gain = round(after.steps_per_s / before.steps_per_s, 3)
    result.status, why = _status(baseline, trial, before is None, result.measured_gain is not None)
    if result.status == "inconclusive":
        result.measured_gain = None
    result.why = why if result.status != "measured" else _unapplied(trial)
    return result


def _status(baseline: Session, trial: Session, no_baseline: bool, gain_measured: bool) -> tuple[str, str | None]:
    """The trial's status and why: interrupted, failed, inconclusive, not measured, or measured."""
    failed = trial.exit_code not in (0, None) and trial.stop_reason not in ("duration", "steps")
    if trial.stop_reason in ("interrupted", "terminated"):
        return "interrupted", f"the trial run was {trial.stop_reason}"
    if failed:
        error = next((e for e in trial.errors if e.kind in ("exception", "oom")), None)
        return "failed", f"the workload exited with code {trial.exit_code}" + (
            f" ({error.type}: {error.message.splitlines()[0][:160] if error.message else ''})" if error else ""
        )
    if (doubt := inconclusive(baseline, trial)) is not None:
        return "inconclusive", doubt
    if not gain_measured:
        return "not-measured", (
            "the run without the remedy had fewer than 3 steady steps"
            if no_baseline
            else "the trial run had fewer than 3 steady steps"
        )
    return "measured", None


def _unapplied(trial: Session) -> str | None:
    """Why a measured trial may not measure its remedy: an override the workload never saw."""
    missed = [o for o in trial.overrides if not o.applied]
    if not any(o.applied for o in trial.overrides):
        return "the workload never saw the override (no matching DataLoader or module?)"
    if missed:
        return "not applied: " + "; ".join(f"{o.name} ({o.note})" if o.note else o.name for o in missed[:3])
    return None


def _round(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None
