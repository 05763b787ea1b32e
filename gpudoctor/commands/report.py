"""`gpudoctor report SESSION_OR_REPORT_JSON`: run the checks again on a saved run, render it.

The checks are pure functions of a Session, so a saved Session (the
`.session.json` beside every report) can be re-judged by a newer gpudoctor, with
other --ignore choices, or rendered in another format, without the GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import logging
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.base.fsutil import unreadable_reason
from gpudoctor.base.jsonmodel import DecodeError
from gpudoctor.commands.argtypes import split_ids
from gpudoctor.diff.compare import workload_identity
from gpudoctor.reports.formats import DEFAULT_FILE_FORMATS, choices
from gpudoctor.reports.formats import file_formats as file_formats_of
from gpudoctor.session import Session, SessionError
from gpudoctor.verdict.report_model import CheckRecord, Report, ReportFinding, as_report

log = logging.getLogger(__name__)

def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="re-run the checks on a saved session (or report) and render it",
        description=__doc__.split("\n\n", 1)[0],
    )
    p.add_argument("input", metavar="SESSION_OR_REPORT_JSON",
                   help="a .session.json, or a report .json with its session beside it")
    p.add_argument("--out", metavar="PATH",
                   help="a directory, or a file stem / .html path (default: ./gpudoctor-reports/)")
    p.add_argument(
        "--format", dest="formats", action="append", choices=choices(), metavar="FMT",
        help=f"{'|'.join(choices())} (repeatable); without --out a single format goes to stdout",
    )
    p.add_argument("--ignore", action="append", default=[], metavar="ID",
                   help="skip a check by ID or slug (repeatable, or comma-separated)")
    p.add_argument("--fail-on", choices=("warning", "critical"),
                   help=f"exit {exitcodes.FAIL_ON} when a finding reaches this severity")
    p.add_argument("--force", action="store_true", help="overwrite existing report files")
    p.add_argument("--quiet", action="store_true", help="no summary on stderr (the files are still written)")
    p.set_defaults(func=run)


def _read_json(path: Path) -> Any:
    from gpudoctor.base.fsutil import InputTooLarge, read_limited

    try:
        raw = read_limited(path)
    except InputTooLarge as exc:
        raise GpudoctorError(f"{path}: {exc}", exitcodes.BAD_DATA) from None
    except IsADirectoryError:
        raise GpudoctorError(f"{path}: is a directory, expected a .json file", exitcodes.BAD_DATA) from None
    except OSError as exc:
        missing = exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR)
        raise GpudoctorError(f"{path}: {unreadable_reason(exc)}",
                             exitcodes.NOT_FOUND if missing else exitcodes.BAD_DATA) from None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise GpudoctorError(f"{path}: not valid JSON (corrupt or truncated file)", exitcodes.BAD_DATA) from None


def load_session_or_report(path: Path) -> tuple[Session | None, dict[str, Any] | None]:
    """The Session to re-judge, else the saved report to render as it is.

    A report names its session file in report["files"]["session"] (beside it);
    when that file is gone only the saved findings can be shown.
    """
    data = _read_json(path)  # read once: the input may be a pipe or FIFO
    schema = str(data.get("schema", "")) if isinstance(data, dict) else ""
    if schema.startswith("gpudoctor.report/"):
        if "session" in data:
            return _session_from(data["session"], path), data
        beside = (data.get("files") or {}).get("session") if isinstance(data.get("files"), dict) else None
        if isinstance(beside, str) and beside and Path(beside).name == beside and (path.parent / beside).is_file():
            return _load_session(path.parent / beside), data
        return None, data
    if schema.startswith("gpudoctor.session/"):
        return _session_from(data, path), None
    raise GpudoctorError(f"{path}: not a gpudoctor session or report (schema {schema or 'missing'!s})",
                         exitcodes.BAD_DATA)


def _session_from(data: Any, path: Path) -> Session:
    try:
        return Session.from_dict(data)
    except SessionError as exc:
        raise GpudoctorError(f"{path}: {exc}", exitcodes.BAD_DATA) from None


def _load_session(path: Path) -> Session:
    try:
        return Session.load(path)
    except SessionError as exc:
        code = exitcodes.NOT_FOUND if not path.exists() else exitcodes.BAD_DATA
        raise GpudoctorError(str(exc), code) from None


def load_report(path: Path, ignore: list[str] | None = None) -> tuple[dict[str, Any], Session | None]:
    """The report for `path`: re-judged from its Session when there is one, else as saved
    (with --ignore applied to the saved findings)."""
    from gpudoctor.verdict.judge import JudgeOptions, judge

    session, saved = load_session_or_report(path)
    if session is not None:
        return judge(session, JudgeOptions(ignore=tuple(ignore or ()))).report, session
    assert saved is not None
    report = check_saved_report(saved, path)
    print(f"gpudoctor: warning: {path}: its session file is not beside it; "
          "showing the saved findings without re-running the checks", file=sys.stderr)
    return _apply_ignore(report, ignore or []).to_dict(), None


def check_saved_report(report: Any, path: Path) -> Report:
    """The saved report decoded through the report model; a file that does not fit it (a
    hand-edited, truncated-and-repaired or hostile one) is refused with one line, BAD_DATA."""
    try:
        return Report.from_dict(report)
    except DecodeError as exc:
        raise GpudoctorError(f"{path}: malformed gpudoctor report: {exc}", exitcodes.BAD_DATA) from None


def render_saved(path: Path, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a renderer on a saved report (no session to rebuild it from): a file that
    passed check_saved_report but still breaks a renderer is bad data, not a bug."""
    try:
        return fn(*args, **kwargs)
    except GpudoctorError:
        raise
    except Exception as exc:
        log.debug("rendering a saved report failed", exc_info=True)
        raise GpudoctorError(f"{path}: malformed gpudoctor report: cannot render it "
                             f"({type(exc).__name__}: {str(exc)[:200]})", exitcodes.BAD_DATA) from None


def _apply_ignore(report: Report, ignore: list[str]) -> Report:
    ignored = {i.strip().upper() for i in ignore}
    if not ignored:
        return report

    def hit(item: ReportFinding | CheckRecord) -> bool:
        return item.id.upper() in ignored or (item.slug or "").upper() in ignored

    return dataclasses.replace(
        report,
        findings=[f for f in report.findings if not hit(f)],
        checks=[dataclasses.replace(c, status="skipped", reason="ignored (--ignore)") if hit(c) else c
                for c in report.checks],
    )


def default_stem(report: dict[str, Any], path: Path) -> str:
    identity = workload_identity(report.get("command"))
    if identity:
        name = identity.split(":", 1)[1]
        return name.rsplit(".", 1)[-1] if identity.startswith("module:") else name
    name = path.name
    for suffix in (".session.json", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def run(args: argparse.Namespace) -> int:
    from gpudoctor.reports import render, show, terminal
    from gpudoctor.verdict.judge import WritePlan, write
    from gpudoctor.verdict.output import plan_outputs

    path = Path(args.input)
    formats: list[str] = list(dict.fromkeys(args.formats or []))
    file_formats = file_formats_of(formats) if formats else list(DEFAULT_FILE_FORMATS)
    report, session = load_report(path, split_ids(args.ignore))
    if session is None:  # a saved report as it is: prove it renders before writing anything
        for fmt in dict.fromkeys([*(formats or file_formats), "terminal"]):
            render_saved(path, render, report, fmt, fail_on=args.fail_on)
    if (not args.out and len(formats) == 1) or not file_formats:
        # one format asked for, no --out: it is the output (pipe it, redirect it)
        show(report, formats[0], sys.stdout, fail_on=args.fail_on)
        return exit_code(report, args.fail_on)
    paths = plan_outputs(args.out, default_stem(report, path), datetime.now(), file_formats, force=args.force,
                         trace=False)
    written = write(report, WritePlan(paths, session=session, fail_on=args.fail_on))
    # the summary is for the human: stderr, so stdout stays clean for scripts
    if not args.quiet:
        terminal.show_summary(written.report, sys.stderr, written={k: str(p) for k, p in written.files.items()})
    return exit_code(report, args.fail_on)


def exit_code(report: Report | dict[str, Any], fail_on: str | None) -> int:
    from gpudoctor.reports._common import fails

    if any(fails(f, fail_on) for f in as_report(report).findings):
        return exitcodes.FAIL_ON
    return exitcodes.OK
