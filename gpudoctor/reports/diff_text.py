"""Renderers for a before/after diff (schema gpudoctor.diff/1): terminal, JSON, Markdown.

Like the report renderers they receive only the finished, typed diff
(gpudoctor.diff.diff_model.Diff, or its JSON dict); strings from the runs are never parsed as markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.diff.diff_model import Diff, MetricChange, StepStats, as_diff

from ._common import format_number
from .console import plain_text, printable, show
from .json_report import _finite, escape_controls
from .markdown import escape

VERDICT_STYLE = {"better": "green", "worse": "red", "unchanged": "dim", "changed": "", "not measured": "dim",
                 "within noise": "dim", "too few steps": "yellow"}
ARROW = {"better": "better", "worse": "worse", "unchanged": "=", "changed": "changed", "not measured": "not measured",
         "within noise": "within noise", "too few steps": "too few steps"}
FINDING_GROUPS = (("resolved", "green"), ("new", "red"), ("changed", "yellow"), ("unchanged", "dim"))


def sample_text(stats: StepStats) -> str:
    """One side's sample: how many steady steps, and the spread of their times."""
    n = stats.steady_steps
    if not n:
        return "no steady steps measured"
    parts = [f"{n} steady step{'s' if n != 1 else ''}"]
    if stats.steps_per_s is not None:
        rate = f"{stats.steps_per_s:.3g} steps/s"
        ci = stats.steps_per_s_ci95
        if ci and stats.window_steps:
            rate += f" (95% CI {ci[0]:.3g} to {ci[1]:.3g} over {stats.windows} windows of {stats.window_steps} steps)"
        parts.append(rate)
    if stats.median_s is not None:
        parts.append(f"median {format_number(stats.median_s, 's')}")
    if stats.iqr_s is not None and n >= 4:
        parts.append(f"IQR {format_number(stats.iqr_s, 's')}")
    ci = stats.median_ci95_s
    if ci:
        parts.append(f"95% CI of the median {format_number(ci[0], 's')} to {format_number(ci[1], 's')}")
    return ", ".join(parts)


def change_text(metric: MetricChange) -> str:
    """The change in the metric's own terms: points for shares and %, ratios for rates."""
    if metric.change is None:
        return ""
    unit = metric.unit
    if unit in ("share", "%"):
        points = round(metric.change * (100 if unit == "share" else 1))
        return f"{points:+d} pts" if points else "0 pts"
    rel = metric.relative_change
    if rel is None:
        return format_number(metric.change, unit)
    percent = round(rel * 100)
    return f"{percent:+d}%" if percent else "0%"


def _value(metric: MetricChange, side: str) -> str:
    return format_number(metric.before if side == "before" else metric.after, metric.unit)


def printable_diff(diff: Diff | Mapping[str, Any]) -> Diff:
    """The diff with every string from the runs shown with its control characters escaped."""
    return Diff.from_dict(printable(as_diff(diff).to_dict()))


def render_terminal(diff: Diff | Mapping[str, Any], console: Console) -> None:
    diff = printable_diff(diff)
    head = Text("gpudoctor diff ", style="bold")
    head.append(diff.verdict, style="bold")
    console.print(head)
    for side, info, samples in (("before", diff.before, diff.samples.before),
                                ("after", diff.after, diff.samples.after)):
        line = Text(f"  {side:<6} ", style="dim")
        line.append(f"{info.file or '?'}  ({', '.join(info.gpus) or 'no GPU'}; {info.workload or 'unknown workload'})",
                    style="dim")
        console.print(line, soft_wrap=True)
        console.print(Text(f"         {sample_text(samples)}", style="dim"), soft_wrap=True)
    if diff.samples.reason:
        console.print(Text(f"  caution: {diff.samples.reason}", style="yellow"), soft_wrap=True)
    for reason in diff.comparable.reasons:
        console.print(Text(f"  warning: not a like-for-like comparison: {reason} (--force)", style="yellow"))
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name, justify in (("Metric", "left"), ("Before", "right"), ("After", "right"), ("Change", "right"),
                          ("", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for m in diff.metrics:
        if m.before is None and m.after is None:
            continue
        style = VERDICT_STYLE.get(m.verdict, "")
        table.add_row(Text(m.label), Text(_value(m, "before")), Text(_value(m, "after")),
                      Text(change_text(m), style=style), Text(ARROW.get(m.verdict, ""), style=style))
    console.print(table)
    for group, style in FINDING_GROUPS:
        for f in diff.findings.group(group):
            line = Text(f"  {group:<9} ", style=style)
            line.append(f"{f.id} ", style="bold")
            line.append(f"[{f.severity_text()}] {' '.join((f.title or '').split())}")
            console.print(line)


def render_json(diff: Diff | Mapping[str, Any], *, indent: int | None = 1) -> str:
    return escape_controls(json.dumps(_finite(as_diff(diff).to_dict()), indent=indent, ensure_ascii=False,
                                      allow_nan=False, default=str)) + "\n"


def render_markdown(diff: Diff | Mapping[str, Any]) -> str:
    diff = printable_diff(diff)
    lines = [f"### gpudoctor diff: {escape(diff.verdict)}", ""]
    for reason in diff.comparable.reasons:
        lines.append(f"> **Not like-for-like**: {escape(reason)}")
    samples = diff.samples
    lines += ["", f"Before: {escape(sample_text(samples.before))}  ",
              f"After: {escape(sample_text(samples.after))}"]
    if samples.reason:
        lines += ["", f"> **Caution**: {escape(samples.reason)}"]
    lines += ["", "| Metric | Before | After | Change |", "|---|---|---|---|"]
    for m in diff.metrics:
        if m.before is None and m.after is None:
            continue
        change = change_text(m)
        if m.verdict in ("better", "worse", "within noise", "too few steps"):
            change = f"{change} ({m.verdict})"
        lines.append(f"| {escape(m.label)} | {escape(_value(m, 'before'))} | {escape(_value(m, 'after'))} "
                     f"| {escape(change)} |")
    lines.append("")
    for group, _ in FINDING_GROUPS:
        items = diff.findings.group(group)
        if items:
            lines.append(f"**{group.capitalize()}**: " + ", ".join(
                f"{escape(f.id)} {escape(f.title or '')} ({escape(f.severity_text())})" for f in items))
            lines.append("")
    return "\n".join(lines) + "\n"


def to_text(diff: Diff | Mapping[str, Any], width: int | None = None) -> str:
    return plain_text(lambda console: render_terminal(diff, console), width)


def show_diff(diff: Diff | Mapping[str, Any], stream: TextIO) -> None:
    """The comparison on `stream`: laid out for a terminal, plain and unwrapped elsewhere."""
    show(lambda console: render_terminal(diff, console), stream)
