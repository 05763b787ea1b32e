"""`gpudoctor checks` (the catalog) and `gpudoctor explain ID` (a check's page)."""

from __future__ import annotations

import argparse
import sys

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.model import STAGES, Check, thresholds_of
from gpudoctor.reports.console import is_terminal, one_line, show
from gpudoctor.verdict.registry import find_check, load_checks


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("checks", help="list the checks (IDs, stages, titles)")
    p.add_argument("--plain", action="store_true", help="tab-separated output for scripts")
    p.set_defaults(func=list_checks)
    p = sub.add_parser("explain", help="print a check's documentation page")
    p.add_argument("check", metavar="ID", help="a check ID (GD102) or slug (input-stall)")
    p.set_defaults(func=explain)


def list_checks(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text  # plugin strings are never console markup

    checks, errors = load_checks()
    if args.plain:
        for check in checks:
            print("\t".join(one_line(v) for v in (check.id, check.slug, check.stage, check.title)))
    else:
        table = Table(title="gpudoctor checks", title_justify="left")
        table.add_column("ID", style="bold")
        table.add_column("slug")
        table.add_column("stage")
        table.add_column("detects")
        for check in checks:
            table.add_row(Text(one_line(check.id)), Text(one_line(check.slug)),
                          f"{check.stage} {STAGES.get(check.stage, '')}", Text(one_line(check.title)))
        show(lambda console: console.print(table), sys.stdout)
        print("Details: gpudoctor explain ID", file=sys.stderr)
    for error in errors:
        print(f"gpudoctor: plugin {one_line(error.name)} failed to load: {one_line(error.reason)}", file=sys.stderr)
    return exitcodes.OK


def explain(args: argparse.Namespace) -> int:
    import inspect

    check = find_check(args.check)
    if check is None:
        raise GpudoctorError(f"no check named {args.check!r} (see `gpudoctor checks`)", exitcodes.NOT_FOUND)
    page = inspect.cleandoc(check.doc or "") or check.title
    header = f"# {check.id} {check.slug}: {check.title}\n\nStage {check.stage} ({STAGES.get(check.stage, '')}).\n\n"
    text = header + page + thresholds_section(check)
    if is_terminal(sys.stdout):
        from rich.markdown import Markdown  # markdown-it: 15-50 ms, for a terminal only (a pipe gets the text)

        show(lambda console: console.print(Markdown(text)), sys.stdout)
    else:
        print(text)
    return exitcodes.OK


def thresholds_section(check: Check) -> str:
    """The limits the check's code compares against: the same objects, with unit and source."""
    limits = thresholds_of(check)
    if not limits:
        return ""
    lines = [f"- {t.name}: **{t.shown()}** ({t.source})" if t.source else f"- {t.name}: **{t.shown()}**"
             for t in limits]
    return "\n\nThresholds in force (read from the code)\n\n" + "\n".join(lines) + "\n"
