"""The terminal summary: what a user sees when the run ends (stderr during diagnose).

Compact on purpose: the verdict, the ranked findings, what to change first, what
could not be checked, and where the full report is. Every string from the run
(argv, kernel names, exception text) is wrapped in rich `Text`, never parsed as
console markup, so a hostile name cannot restyle or hide the output.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.padding import Padding
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from gpudoctor.base.text import format_run_seconds
from gpudoctor.verdict.report_model import Report, ReportFinding

from ._common import (
    command_line,
    gain_text,
    key_numbers,
    override_rows,
    printable_report,
    skipped_checks,
    stopped_as_asked,
    top_remedies,
    trial_rows,
    try_heading,
)
from ._hotspots import hotspot_line
from .console import plain_text, printable, show
from .formats import PLAIN, RenderOptions
from .ranks import terminal_table

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
MAX_REMEDIES = 3


def render(
    report: Report | Mapping[str, Any],
    console: Console,
    *,
    written: Mapping[str, str | Path] | None = None,
) -> None:
    """Print the summary. `written` (kind -> path) overrides the report's files when the
    caller knows where the files really went (paths relative to the report otherwise)."""
    report = printable_report(report)
    if written is not None:
        written = printable({k: str(v) for k, v in written.items()})
    console.print(_verdict(report))
    overrides = override_rows(report)
    if overrides:
        console.print(Text("Overrides applied in this run (gpudoctor --try):", style="bold"))
        for row in overrides:
            console.print(Text("  " + _one_line(row)))
    if report.findings:
        console.print(_findings_table(report.findings))
    else:
        console.print(Text("No findings.", style="green"))
    for finding in top_remedies(report, MAX_REMEDIES):
        _print_remedy(console, finding)
    _trials(report, console)
    rank_table = terminal_table(report)  # a distributed job: one row per rank
    if rank_table is not None:
        console.print(rank_table)
    hotspots = hotspot_line(report)
    if hotspots:
        console.print(Text(printable(hotspots), style="dim"))
    skipped = skipped_checks(report)
    if skipped:
        console.print(Text("Not checked:", style="bold"))
        for check in skipped:
            line = Text("  ")
            line.append(check.id, style="dim bold")
            line.append(f" {check.status}: ", style="dim")
            line.append(_one_line(check.reason or "no reason recorded"), style="dim")
            if console.is_terminal:
                console.print(line, overflow="ellipsis", no_wrap=True)
            else:
                console.print(line)  # a log keeps the whole reason, wrapped
    files = dict(written) if written is not None else dict(report.files)
    if files:
        console.print(Text("Written:", style="bold"))
        for kind, path in files.items():
            line = Text(f"  {kind:<8} ", style="dim")
            line.append(str(path))
            console.print(line, soft_wrap=True)


def _trials(report: Report, console: Console) -> None:
    """`--try`: what each remedy measured, and why the others were not tried."""
    heading = try_heading(report)
    if heading is None:
        return
    console.print(Text(heading + ":", style="bold"))
    rows = trial_rows(report)
    if not rows:
        console.print(Text("  no finding had a remedy to try", style="dim"))
    for row in rows:
        line = Text("  ")
        line.append(row["subject"], style="bold")
        untried = row["text"].startswith("not tried")
        line.append(" " + _one_line(row["text"]), style="dim" if untried else "")
        if row["steps"]:
            line.append(f" [steady steps {row['steps']}]", style="dim")
        console.print(line)


def _verdict(report: Report) -> Text:
    worst = next((f.severity for f in report.root_causes()), None)
    style = SEVERITY_STYLE.get(worst or "", "green") if worst != "info" else "green"
    text = Text("gpudoctor ", style="bold")
    text.append(report.summary.verdict or "no verdict", style=f"bold {style}")
    meta = [format_run_seconds(report.duration_s or 0.0)]
    if report.exit_code not in (None, 0) and not stopped_as_asked(report):
        meta.append(f"workload exit code {report.exit_code}")
    if report.stop_reason and report.stop_reason != "exited":
        meta.append(f"stopped: {report.stop_reason}")
    cmd = command_line(report)
    if cmd:
        meta.append(cmd if len(cmd) <= 60 else cmd[:57] + "...")
    text.append("\n  " + " | ".join(meta), style="dim")
    return text


def _findings_table(findings: list[ReportFinding]) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=False)
    table.add_column("ID", no_wrap=True)
    table.add_column("Severity", no_wrap=True)
    table.add_column("Finding", ratio=3)
    table.add_column("Key numbers", ratio=3)
    table.add_column("Gain", no_wrap=True, justify="right")
    for f in findings:
        cause = f.consequence_of
        dim = "dim" if cause else ""
        title = Text(_one_line(f.title), style=dim)
        if cause:
            title.append(f" (consequence of {cause})", style="dim italic")
        table.add_row(
            Text(f.id or "?", style=f"bold {dim}".strip()),
            Text(f.severity, style="dim" if cause else SEVERITY_STYLE.get(f.severity, "")),
            title,
            Text(key_numbers(f), style="dim"),
            Text(gain_text(f.estimated_gain) if not cause else "", style=dim),
        )
    return table


def _print_remedy(console: Console, finding: ReportFinding) -> None:
    """The remedy's sentence and its code. Coloured at a terminal; elsewhere the code is
    plain text, never re-flowed (whatever the width), so it pastes as it was written."""
    head = Text("-> ", style="bold")
    head.append(finding.id or "?", style="bold")
    head.append(" " + _one_line(finding.remedy.text if finding.remedy else ""))
    console.print(head)
    code = finding.remedy.code.rstrip() if finding.remedy and finding.remedy.code else ""
    if not code:
        return
    if console.is_terminal:
        console.print(Padding(Syntax(code, _lexer(code), theme="ansi_dark", background_color="default",
                                     word_wrap=True), (0, 0, 0, 3)))
    else:
        console.print(Text("\n".join("   " + line for line in code.split("\n"))), soft_wrap=True)


def _lexer(code: str) -> str:
    """Shell snippets (env vars, commands) versus Python: good enough for colouring."""
    first = code.lstrip().split("\n", 1)[0]
    if first.startswith(("export ", "$ ", "torchrun", "python ", "pip ")) or first.split("=", 1)[0].isupper():
        return "bash"
    return "python"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def to_text(report: Report | Mapping[str, Any], options: RenderOptions = PLAIN, *, width: int | None = None) -> str:
    """The same summary as plain text (for `--format terminal` into a pipe; a formats.Renderer,
    the options change nothing): unwrapped unless a width is given."""
    return plain_text(lambda console: render(report, console), width)


def show_summary(report: Report | Mapping[str, Any], stream: TextIO, *,
                 written: Mapping[str, str | Path] | None = None) -> None:
    """The summary on `stream`: laid out for a terminal, plain and unwrapped elsewhere."""
    show(lambda console: render(report, console, written=written), stream)
