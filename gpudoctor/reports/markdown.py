"""A Markdown summary to paste into a ticket or a pull-request comment.

Ticket systems render Markdown with inline HTML allowed, so every string from the
run is escaped for both: HTML-special characters become entities, Markdown
punctuation is backslash-escaped, table cells lose their pipes and newlines, and
code goes into a fence longer than any backtick run inside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpudoctor.base.text import format_run_seconds
from gpudoctor.verdict.report_model import Report

from ._common import (
    command_line,
    gain_text,
    key_numbers,
    override_rows,
    printable_report,
    skipped_checks,
    stopped_as_asked,
    summary_rows,
    top_remedies,
    trial_rows,
    try_heading,
)
from .formats import PLAIN, RenderOptions
from .ranks import markdown_lines as ranks_lines

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
MAX_REMEDIES = 5


def escape(text: Any) -> str:
    """Inline text safe for Markdown and for the HTML that Markdown allows."""
    value = " ".join(str(text).split())
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return _MD_SPECIAL.sub(r"\\\1", value)


def code_span(text: Any) -> str:
    value = " ".join(str(text).split())
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", value)), default=0) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def code_block(code: str, lang: str = "") -> str:
    fence = "`" * max(3, max((len(m) for m in re.findall(r"`+", code)), default=0) + 1)
    return f"{fence}{lang}\n{code.rstrip()}\n{fence}"


def render(report: Report | Mapping[str, Any], options: RenderOptions = PLAIN) -> str:
    """The Markdown summary (a formats.Renderer: every finding is shown, whatever the options)."""
    report = printable_report(report)
    lines = [f"### gpudoctor: {escape(report.summary.verdict or 'no verdict')}", ""]
    meta = [f"duration {format_run_seconds(report.duration_s or 0.0)}"]
    if not stopped_as_asked(report):
        meta.append(f"exit code {report.exit_code}")
    if report.stop_reason:
        meta.append(f"stopped: {escape(report.stop_reason)}")
    lines.append(f"Command: {code_span(command_line(report) or '(not recorded)')}  ")
    lines.append(" | ".join(meta))
    lines.append("")

    if report.findings:
        lines += ["| ID | Severity | Finding | Key numbers | Est. gain |", "|---|---|---|---|---|"]
        for f in report.findings:
            title = escape(f.title)
            if f.consequence_of:
                title = f"_{title}_ (consequence of {escape(f.consequence_of)})"
            severity = escape(f.severity)
            if f.severity == "critical" and not f.consequence_of:
                severity = f"**{severity}**"
            lines.append(
                f"| {escape(f.id or '?')} | {severity} | {title} | {escape(key_numbers(f))} "
                f"| {'' if f.consequence_of else escape(gain_text(f.estimated_gain))} |"
            )
    else:
        lines.append("No findings.")
    lines.append("")

    remedies = top_remedies(report, MAX_REMEDIES)
    if remedies:
        lines += ["#### What to change first", ""]
        for f in remedies:
            text, code = (f.remedy.text, f.remedy.code) if f.remedy else ("", None)
            lines.append(f"**{escape(f.id or '?')}**: {escape(text)}")
            lines.append("")
            if code:
                lines += [code_block(code, "python"), ""]

    heading = try_heading(report)
    if heading is not None:
        lines += [f"#### {escape(heading)}", "", "| Findings | Predicted vs measured | Steady steps (without / with) |",
                  "|---|---|---|"]
        for row in trial_rows(report):
            lines.append(f"| {escape(row['subject'])} | {escape(row['text'])} | {escape(row['steps'])} |")
        lines.append("")
    overrides = override_rows(report)
    if overrides:
        lines += ["#### Overrides applied in this run (gpudoctor --try)", ""]
        lines += [f"- {escape(row)}" for row in overrides]
        lines.append("")

    lines += ranks_lines(report, escape)  # a distributed job: one row per rank
    lines += ["<details><summary>Measurements</summary>", "", "| | |", "|---|---|"]
    lines += [f"| {escape(name)} | {escape(value)} |" for name, value in summary_rows(report)]
    lines += ["", "</details>", ""]

    skipped = skipped_checks(report)
    if skipped:
        lines += ["#### Not checked", ""]
        for c in skipped:
            lines.append(f"- {escape(c.id or '?')} ({escape(c.status)}): {escape(c.reason or 'no reason recorded')}")
        lines.append("")
    lines.append(f"<sub>gpudoctor {escape(report.tool.version)}, schema {escape(report.schema)}</sub>")
    return "\n".join(lines) + "\n"
