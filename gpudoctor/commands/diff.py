"""`gpudoctor diff BEFORE.json AFTER.json`: did the change help? (the playbook's A/B check)

Compares throughput, step time, data wait, SM activity, GPU utilization and memory,
and which findings were resolved, are new, changed severity or remain. Says how many
steady steps each side measured and their spread, and calls a speedup real only with
enough steps (10 each) whose median step times' 95% intervals do not overlap. Refuses to compare runs on
different GPUs or of different workloads unless --force: such a "speedup" would
measure the hardware or the program, not the change.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.reports.formats import DEFAULT_FILE_FORMATS, choices, file_formats
from gpudoctor.session import Session


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "diff",
        help="compare two runs (before/after a change)",
        description=__doc__.split("\n\n", 1)[0],
    )
    p.add_argument("before", metavar="BEFORE.json", help="report or session of the run before the change")
    p.add_argument("after", metavar="AFTER.json", help="report or session of the run after the change")
    p.add_argument(
        "--out", metavar="PATH", help="write the comparison (HTML and JSON by default) to a directory or file stem"
    )
    p.add_argument(
        "--format",
        dest="formats",
        action="append",
        choices=choices(diff=True),
        metavar="FMT",
        help=f"{'|'.join(choices(diff=True))} (repeatable); without --out the comparison goes to stdout "
        "(terminal by default)",
    )
    p.add_argument(
        "--force", action="store_true", help="compare runs from different GPUs or workloads; overwrite existing files"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gpudoctor.commands.report import load_report, render_saved
    from gpudoctor.diff.compare import comparability, diff
    from gpudoctor.reports import diff_text, render_diff, show_diff
    from gpudoctor.reports.console import printable, show
    from gpudoctor.verdict.output import plan_outputs, write_outputs

    before_path, after_path = Path(args.before), Path(args.after)
    before, before_session = load_report(before_path)
    after, after_session = load_report(after_path)
    saved = [p for p, s in ((before_path, before_session), (after_path, after_session)) if s is None]

    def guard(fn: Any, *a: Any, **k: Any) -> Any:
        """A saved report (no session to rebuild it from) that breaks the comparison is bad data."""
        return render_saved(saved[0], fn, *a, **k) if saved else fn(*a, **k)

    reasons = guard(comparability, before, after)
    if reasons and not args.force:
        raise GpudoctorError(
            f"not comparing {before_path} with {after_path}: {'; '.join(reasons)} (use --force to compare anyway)",
            exitcodes.DIFFERENT_RUNS,
        )
    result = guard(diff, before, after, before_name=str(before_path), after_name=str(after_path),
                   forced=bool(reasons), before_steps=_steady_durations(before_session),
                   after_steps=_steady_durations(after_session))
    formats: list[str] = list(dict.fromkeys(args.formats or []))
    to_files = file_formats(formats) if formats else list(DEFAULT_FILE_FORMATS)
    if saved:  # a saved report stands in for a session: prove the comparison renders first
        for fmt in dict.fromkeys([*(formats or ["terminal"]), *to_files, "terminal"]):
            guard(render_diff, result, fmt)
    if not args.out or not to_files:
        # no --out: the comparison is the output (terminal by default, like `git diff`)
        for fmt in formats or ["terminal"]:
            show_diff(result, fmt, sys.stdout)
        return exitcodes.OK
    stem = f"diff-{_stem(before_path)}-vs-{_stem(after_path)}"
    paths = plan_outputs(args.out, stem, datetime.now(), to_files, force=args.force, session=False, trace=False)
    written = write_outputs(paths, result.to_dict(), None, render=render_diff)
    files = printable({kind: str(path) for kind, path in written.files.items()})

    def draw(console: Console) -> None:
        diff_text.render_terminal(written.report, console)
        for kind, path in files.items():
            console.print(f"  {kind:<8} {path}", markup=False, highlight=False, soft_wrap=True)

    show(draw, sys.stderr)
    return exitcodes.OK


def _steady_durations(session: Session | None) -> list[float] | None:
    """Every steady step's duration (the report's timeline holds a subsample of long runs)."""
    return [r.duration_s for r in session.steady_steps()] if session is not None else None


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".session.json", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)][:40]
    return name[:40]
