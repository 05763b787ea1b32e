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

VERDICT_STYLE = {"better": "green", "worse": "red", "unchanged": "dim", "changed": "", "not measured": "dim"}
ARROW = {"better": "better", "worse": "worse", "unchanged": "=", "changed": "changed", "not measured": "not measured"}


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
    for group, style in (("resolved", "green"), ("new", "red"), ("unchanged", "dim")):
        for f in findings.get(group) or []:
            line = Text(f"  {group:<9} ", style=style)
            line.append(f"{f.get('id')} ", style="bold")
            sev = f.get("severity_after") or f.get("severity_before")
            if group == "unchanged" and f.get("severity_before") != f.get("severity_after"):
                sev = f"{f.get('severity_before')} -> {f.get('severity_after')}"
            line.append(f"[{sev}] {' '.join(str(f.get('title') or '').split())}")
            console.print(line)


def render_json(diff: Mapping[str, Any], *, indent: int | None = 1) -> str:
    return escape_controls(json.dumps(_finite(dict(diff)), indent=indent, ensure_ascii=False, allow_nan=False,
                                      default=str)) + "\n"


def render_markdown(diff: Mapping[str, Any]) -> str:
    diff = printable(diff)
    lines = [f"### gpudoctor diff: {escape(diff.get('verdict') or '')}", ""]
    for reason in (diff.get("comparable") or {}).get("reasons") or []:
        lines.append(f"> **Not like-for-like**: {escape(reason)}")
    lines += ["", "| Metric | Before | After | Change |", "|---|---|---|---|"]
    for m in diff.get("metrics") or []:
        if m.get("before") is None and m.get("after") is None:
            continue
        change = change_text(m)
        if m.get("verdict") in ("better", "worse"):
            change = f"{change} ({m['verdict']})"
        lines.append(f"| {escape(m.get('label'))} | {escape(_value(m, 'before'))} | {escape(_value(m, 'after'))} | {escape(change)} |")
    lines.append("")
    findings = diff.get("findings") or {}
    for group in ("resolved", "new", "unchanged"):
        items = findings.get(group) or []
        if items:
            lines.append(f"**{group.capitalize()}**: " + ", ".join(f"{escape(f.get('id'))} {escape(f.get('title') or '')}" for f in items))
            lines.append("")
    return "\n".join(lines) + "\n"


def to_text(diff: Mapping[str, Any], width: int | None = None) -> str:
    return plain_text(lambda console: render_terminal(diff, console), width)


def show_diff(diff: Mapping[str, Any], stream: TextIO) -> None:
    """The comparison on `stream`: laid out for a terminal, plain and unwrapped elsewhere."""
    show(lambda console: render_terminal(diff, console), stream)
