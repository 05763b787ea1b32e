"""Renderers for a before/after diff (schema gpudoctor.diff/1): terminal, JSON, Markdown.

Like the report renderers they receive only the finished diff dict
(gpudoctor.diff.compare); strings from the runs are never parsed as markup.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._common import format_number
from .console import plain_text, printable, show
from .json_report import _finite, escape_controls
from .markdown import escape

VERDICT_STYLE = {"better": "green", "worse": "red", "unchanged": "dim", "changed": "", "not measured": "dim",
                 "within noise": "dim", "too few steps": "yellow"}
ARROW = {"better": "better", "worse": "worse", "unchanged": "=", "changed": "changed", "not measured": "not measured",
         "within noise": "within noise", "too few steps": "too few steps"}
FINDING_GROUPS = (("resolved", "green"), ("new", "red"), ("changed", "yellow"), ("unchanged", "dim"))


def sample_text(stats: Mapping[str, Any] | None) -> str:
    """One side's sample: how many steady steps, and the spread of their times."""
    stats = stats or {}
    n = stats.get("steady_steps") or 0
    if not n:
        return "no steady steps measured"
    parts = [f"{n} steady step{'s' if n != 1 else ''}"]
    if stats.get("median_s") is not None:
        parts.append(f"median {format_number(stats['median_s'], 's')}")
    if stats.get("iqr_s") is not None and n >= 4:
        parts.append(f"IQR {format_number(stats['iqr_s'], 's')}")
    ci = stats.get("median_ci95_s")
    if ci:
        parts.append(f"95% CI of the median {format_number(ci[0], 's')} to {format_number(ci[1], 's')}")
    return ", ".join(parts)


def severity_text(finding: Mapping[str, Any]) -> str:
    before, after = finding.get("severity_before"), finding.get("severity_after")
    if before and after and before != after:
        return f"{before} -> {after}"
    return str(after or before)


def change_text(metric: Mapping[str, Any]) -> str:
    """The change in the metric's own terms: points for shares and %, ratios for rates."""
    if metric.get("change") is None:
        return ""
    unit = metric.get("unit")
    if unit in ("share", "%"):
        points = round(metric["change"] * (100 if unit == "share" else 1))
        return f"{points:+d} pts" if points else "0 pts"
    rel = metric.get("relative_change")
    if rel is None:
        return format_number(metric["change"], unit)
    percent = round(rel * 100)
    return f"{percent:+d}%" if percent else "0%"


def _value(metric: Mapping[str, Any], side: str) -> str:
    return format_number(metric.get(side), metric.get("unit"))


def render_terminal(diff: Mapping[str, Any], console: Console) -> None:
    diff = printable(diff)
    head = Text("gpudoctor diff ", style="bold")
    head.append(str(diff.get("verdict") or ""), style="bold")
    console.print(head)
    for side in ("before", "after"):
        info = diff.get(side) or {}
        line = Text(f"  {side:<6} ", style="dim")
        line.append(f"{info.get('file') or '?'}  ({', '.join(info.get('gpus') or []) or 'no GPU'}; {info.get('workload') or 'unknown workload'})", style="dim")
        console.print(line, soft_wrap=True)
        samples = (diff.get("samples") or {}).get(side)
        console.print(Text(f"         {sample_text(samples)}", style="dim"), soft_wrap=True)
    samples = diff.get("samples") or {}
    if samples.get("reason"):
        console.print(Text(f"  caution: {samples['reason']}", style="yellow"), soft_wrap=True)
    reasons = (diff.get("comparable") or {}).get("reasons") or []
    for reason in reasons:
        console.print(Text(f"  warning: not a like-for-like comparison: {reason} (--force)", style="yellow"))
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name, justify in (("Metric", "left"), ("Before", "right"), ("After", "right"), ("Change", "right"), ("", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for m in diff.get("metrics") or []:
        if m.get("before") is None and m.get("after") is None:
            continue
        style = VERDICT_STYLE.get(m.get("verdict", ""), "")
        table.add_row(Text(str(m.get("label"))), Text(_value(m, "before")), Text(_value(m, "after")), Text(change_text(m), style=style), Text(ARROW.get(m.get("verdict", ""), ""), style=style))
    console.print(table)
    findings = diff.get("findings") or {}
    for group, style in FINDING_GROUPS:
        for f in findings.get(group) or []:
            line = Text(f"  {group:<9} ", style=style)
            line.append(f"{f.get('id')} ", style="bold")
            line.append(f"[{severity_text(f)}] {' '.join(str(f.get('title') or '').split())}")
            console.print(line)


def render_json(diff: Mapping[str, Any], *, indent: int | None = 1) -> str:
    return escape_controls(json.dumps(_finite(dict(diff)), indent=indent, ensure_ascii=False, allow_nan=False,
                                      default=str)) + "\n"


def render_markdown(diff: Mapping[str, Any]) -> str:
    diff = printable(diff)
    lines = [f"### gpudoctor diff: {escape(diff.get('verdict') or '')}", ""]
    for reason in (diff.get("comparable") or {}).get("reasons") or []:
        lines.append(f"> **Not like-for-like**: {escape(reason)}")
    samples = diff.get("samples") or {}
    lines += ["", f"Before: {escape(sample_text(samples.get('before')))}  ",
              f"After: {escape(sample_text(samples.get('after')))}"]
    if samples.get("reason"):
        lines += ["", f"> **Caution**: {escape(samples['reason'])}"]
    lines += ["", "| Metric | Before | After | Change |", "|---|---|---|---|"]
    for m in diff.get("metrics") or []:
        if m.get("before") is None and m.get("after") is None:
            continue
        change = change_text(m)
        if m.get("verdict") in ("better", "worse", "within noise", "too few steps"):
            change = f"{change} ({m['verdict']})"
        lines.append(f"| {escape(m.get('label'))} | {escape(_value(m, 'before'))} | {escape(_value(m, 'after'))} | {escape(change)} |")
    lines.append("")
    findings = diff.get("findings") or {}
    for group, _ in FINDING_GROUPS:
        items = findings.get(group) or []
        if items:
            lines.append(f"**{group.capitalize()}**: " + ", ".join(
                f"{escape(f.get('id'))} {escape(f.get('title') or '')} ({escape(severity_text(f))})" for f in items))
            lines.append("")
    return "\n".join(lines) + "\n"


def to_text(diff: Mapping[str, Any], width: int | None = None) -> str:
    return plain_text(lambda console: render_terminal(diff, console), width)


def show_diff(diff: Mapping[str, Any], stream: TextIO) -> None:
    """The comparison on `stream`: laid out for a terminal, plain and unwrapped elsewhere."""
    show(lambda console: render_terminal(diff, console), stream)
