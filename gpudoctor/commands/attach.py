"""`gpudoctor attach PID`: sample a running process's CPU and GPUs from outside, then report.

    gpudoctor attach 4242 --duration 30
    gpudoctor attach "$(pgrep -f train.py | head -1)" --duration 60 --out reports/

No agent is injected: the checks that need one (steps, DataLoader, profiler window,
allocator) are skipped with the reason "attach: no agent in the process". Ctrl-C stops
early and still reports. Exit codes: 0 (3 with --fail-on), 66 no such process, 69 not
Linux, 77 no permission to read the process, 73/74 as for diagnose's outputs.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import signal
from typing import Any

from gpudoctor.base import exitcodes
from gpudoctor.commands.argtypes import positive_float, split_ids
from gpudoctor.reports.formats import DEFAULT_FILE_FORMATS, choices, with_defaults

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("attach", help="sample a running process's CPU and GPUs (no agent) and report",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pid", type=int, metavar="PID", help="the process to watch (its children are included)")
    p.add_argument("--duration", type=positive_float, default=30.0, metavar="SECONDS",
                   help="how long to sample (default 30; Ctrl-C stops earlier)")
    p.add_argument("--interval", type=positive_float, default=0.5, metavar="SECONDS",
                   help="CPU and GPU sampling interval (default 0.5)")
    p.add_argument("--data", action="append", default=[], metavar="PATH",
                   help="dataset location to probe (slow or network storage, GD104)")
    p.add_argument("--out", metavar="PATH",
                   help="report directory or file stem (default gpudoctor-reports/<name>-<time>)")
    p.add_argument("--json", dest="json_path", metavar="PATH", help="also write the JSON report here")
    p.add_argument(
        "--format",
        dest="formats",
        action="append",
        default=[],
        choices=choices(files_only=True),
        metavar="FMT",
        help=f"{'|'.join(choices(files_only=True))} (repeatable); "
        f"{' and '.join(DEFAULT_FILE_FORMATS)} are always written",
    )
    p.add_argument("--ignore", action="append", default=[], metavar="ID", help="silence a check (ID or slug)")
    p.add_argument("--fail-on", choices=["warning", "critical"],
                   help=f"exit {exitcodes.FAIL_ON} when findings reach this severity")
    p.add_argument("--force", action="store_true", help="overwrite existing report files")
    p.add_argument("--quiet", action="store_true", help="no terminal summary (files are still written)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, nvml: Any = None) -> int:

    from gpudoctor.base.exitcodes import GpudoctorError
    from gpudoctor.pipeline import show_summary
    from gpudoctor.run.attacher import (
        NO_AGENT,
        Attacher,
        AttachOptions,
        attach_verdict,
        open_target,
        runnable_without_agent,
    )
    from gpudoctor.run.status import say
    from gpudoctor.verdict.engine import exit_status, gate_line
    from gpudoctor.verdict.judge import JudgeOptions, WritePlan, judge, write
    from gpudoctor.verdict.output import plan_outputs, safe_stem

    process = open_target(args.pid)
    plan = plan_outputs(args.out, safe_stem(f"attach-{_name(process)}"), datetime.datetime.now(),
                        with_defaults(args.formats), force=args.force, json_path=args.json_path, trace=False)
    attacher = Attacher(process, AttachOptions(duration_s=args.duration, interval_s=args.interval,
                                                         data_paths=tuple(args.data), nvml=nvml))
    previous = signal.signal(signal.SIGINT, lambda signum, frame: attacher.interrupt())
    say(f"gpudoctor: attached to process {process.pid} ({_name(process)}) for {args.duration:g}s "
        "(Ctrl-C: stop and report)")
    try:
        session = attacher.run()
    finally:
        signal.signal(signal.SIGINT, previous)
    report, result = judge(session, JudgeOptions(ignore=tuple(split_ids(args.ignore)), runnable=runnable_without_agent,
                                                 not_runnable_reason=NO_AGENT))
    if report["summary"].get("measured") is False:
        report["summary"]["verdict"] = attach_verdict(session)
    try:
        written = write(report, WritePlan(plan, session=session, fail_on=args.fail_on, elsewhere=True))
    except GpudoctorError as exc:
        if exc.code == exitcodes.CANNOT_WRITE and not args.quiet:
            show_summary(report, {})  # nowhere took the files: the diagnosis is still shown, then the error
        raise
    if not args.quiet:
        show_summary(written.report, {k: str(v) for k, v in written.files.items()})
    measured = report["summary"].get("measured", True)
    code = exit_status(0, result.findings, args.fail_on, measured=measured)
    if code == exitcodes.FAIL_ON:
        say(gate_line(result.findings, args.fail_on, measured))
    return code


def _name(process: Any) -> str:
    try:
        return str(process.name())
    except Exception:  # noqa: BLE001 (a process gone or unreadable: its pid names it)
        return str(process.pid)
