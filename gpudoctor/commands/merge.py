"""`gpudoctor merge A.session.json B.session.json ... --out DIR`: one report for a multi-node job.

Run `gpudoctor diagnose` on every node of the job (one per node, under Slurm or any
launcher); each writes a Session holding its node's ranks. `merge` joins them and
judges the whole job once: the per-rank table, the straggler and the other
multi-GPU checks over all ranks.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.reports.formats import DEFAULT_FILE_FORMATS, choices
from gpudoctor.session import Session, SessionError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("merge", help="merge the Sessions of one multi-node job (one per node) into one report",
                              description=(__doc__ or "").split("\n\n", 1)[0])
    p.add_argument("inputs", nargs="+", metavar="SESSION_JSON", help="one .session.json per node")
    p.add_argument("--out", metavar="PATH", help="a directory, or a file stem (default: ./gpudoctor-reports/)")
    p.add_argument("--format", dest="formats", action="append", choices=choices(files_only=True), metavar="FMT",
                   help=f"{'|'.join(choices(files_only=True))} (repeatable); "
                   f"{' and '.join(DEFAULT_FILE_FORMATS)} by default")
    p.add_argument("--ignore", action="append", default=[], metavar="ID", help="skip a check by ID or slug")
    p.add_argument("--fail-on", choices=("warning", "critical"),
                   help=f"exit {exitcodes.FAIL_ON} when a finding reaches this severity")
    p.add_argument("--force", action="store_true", help="overwrite existing report files")
    p.add_argument("--quiet", action="store_true", help="no summary on stderr (the files are still written)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpudoctor.commands.argtypes import split_ids
    from gpudoctor.commands.report import exit_code
    from gpudoctor.reports import terminal
    from gpudoctor.session.merge_nodes import MergeError, merge_sessions
    from gpudoctor.verdict.judge import JudgeOptions, WritePlan, judge, write
    from gpudoctor.verdict.output import plan_outputs

    sessions = []
    for name in args.inputs:
        path = Path(name)
        if not path.exists():
            raise GpudoctorError(f"{name}: no such file", exitcodes.NOT_FOUND)
        try:
            sessions.append((path.name, Session.load(path)))
        except SessionError as exc:
            raise GpudoctorError(str(exc), exitcodes.BAD_DATA) from None
    try:
        merged = merge_sessions(sessions)
    except MergeError as exc:
        raise GpudoctorError(f"merge refused: {exc}", exitcodes.DIFFERENT_RUNS) from None
    report = judge(merged, JudgeOptions(ignore=tuple(split_ids(args.ignore)))).report
    formats = list(dict.fromkeys(args.formats or DEFAULT_FILE_FORMATS))
    paths = plan_outputs(args.out, "merged", datetime.now(), formats, force=args.force, trace=False)
    written = write(report, WritePlan(paths, session=merged, fail_on=args.fail_on))
    if not args.quiet:
        terminal.show_summary(written.report, sys.stderr, written={k: str(p) for k, p in written.files.items()})
    return exit_code(report, args.fail_on)
