"""The preflight checklist in the terminal (stderr): one row per item, then how to fix
what failed or warned, then where the files went.

Every string from the machine (paths, variable values, process names) is a rich
`Text`, never parsed as console markup, with its control characters shown as escapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .console import printable

STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "not-checked": "dim"}
STATUS_LABEL = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "not-checked": "n/c"}


def render(report: Mapping[str, Any], console: Console, *, written: Mapping[str, str] | None = None) -> None:
    report = printable(dict(report))  # an environment value may hold terminal controls
    written = printable(dict(written)) if written else written
    items = list(report.get("items") or [])
    console.print(_headline(report))
    table = Table(show_edge=False, pad_edge=False, expand=False, header_style="bold")
    table.add_column("", no_wrap=True)
    table.add_column("Item", no_wrap=True)
    table.add_column("Found")
    table.add_column("Expected")
    checked = [i for i in items if i.get("status") != "not-checked"]
    for item in checked:
        status = str(item.get("status"))
        table.add_row(Text(STATUS_LABEL.get(status, status), style=STATUS_STYLE.get(status, "")),
                      Text(f"{item.get('id')} {item.get('slug')}"),
                      Text(str(item.get("found") or "")), Text(str(item.get("expected") or ""), style="dim"))
    if checked:
        console.print(table)
    _not_checked(console, [i for i in items if i.get("status") == "not-checked"])
    for status in ("fail", "warn"):
        for item in items:
            if item.get("status") == status:
                console.print(_fix(item))
    job = report.get("job")
    if job:
        line = Text("Job: ", style="bold")
        line.append(str(job.get("verdict") or "no verdict"))
        console.print(line)
        files = job.get("files") or {}
        if files.get("html"):
            console.print(Text(f"  full diagnosis: {files['html']}", style="dim"), soft_wrap=True)
    ignored = report.get("ignored") or []
    if ignored:
        console.print(Text("Ignored: " + ", ".join(f"{i['id']} {i['slug']}" for i in ignored), style="dim"))
    if written:
        console.print(Text("Written:", style="bold"))
        for kind, path in written.items():
            line = Text(f"  {kind:<6} ", style="dim")
            line.append(str(path))
            console.print(line, soft_wrap=True)


def _not_checked(console: Console, items: list[Mapping[str, Any]]) -> None:
    """Items that could not be read, grouped by reason (one missing driver explains many)."""
    if not items:
        return
    console.print(Text(f"Not checked ({len(items)}):", style="bold"))
    by_reason: dict[str, list[str]] = {}
    for item in items:
        by_reason.setdefault(str(item.get("reason") or "no reason recorded"), []).append(str(item.get("id")))
    for reason, ids in by_reason.items():
        line = Text("  ")
        line.append(", ".join(ids), style="bold dim")
        line.append(f": {reason}", style="dim")
        console.print(line)


def _headline(report: Mapping[str, Any]) -> Text:
    host = report.get("host") or {}
    failed = (report.get("counts") or {}).get("fail")
    text = Text("gpudoctor preflight ", style="bold")
    text.append(str(report.get("verdict") or ""), style="bold red" if failed else "bold green")
    gpus = host.get("gpus") or []
    names = sorted({str(g.get("name")) for g in gpus})
    meta = [str(host.get("name") or "?"), f"{len(gpus)} x {', '.join(names)}" if gpus else "no GPU",
            f"driver {host.get('driver')}" if host.get("driver") else None,
            f"torch {host.get('torch')}" if host.get("torch") else None]
    policy = (report.get("policy") or {}).get("source")
    meta.append(f"policy {policy}" if policy else "no policy")
    text.append("\n" + " | ".join(m for m in meta if m), style="dim")
    return text


def _fix(item: Mapping[str, Any]) -> Text:
    status = str(item.get("status"))
    text = Text(f"-> {item.get('id')} {item.get('slug')}: ", style=STATUS_STYLE.get(status, ""))
    text.append(str(item.get("fix") or ""))
    if item.get("note"):
        text.append(f" ({item['note']})", style="dim")
    if item.get("fix_code"):
        text.append("\n   ")
        text.append(str(item["fix_code"]), style="cyan")
    return text


def to_text(report: Mapping[str, Any], width: int = 120) -> str:
    """The same checklist as plain text (tests, logs)."""
    import io

    buffer = io.StringIO()
    render(report, Console(file=buffer, width=width, color_system=None, highlight=False))
    return buffer.getvalue()
