"""The sweep's terminal summary: one table row per batch size, then the answers.

Strings from the run (the target, error messages) go through rich `Text`, never
console markup, so a hostile exception message cannot restyle the output.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpudoctor.sweep.sweep_model import SweepReport, as_sweep

from . import sweep_view

STATUS_STYLE = {"ok": "green", "oom": "yellow", "skipped": "dim"}


def _table(report: SweepReport) -> Table:
    gpu = report.on_gpu
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    columns = [("batch", "batch"), ("status", "status"), ("samples/s", "throughput"),
               ("p50 ms", "p50"), ("p90 ms", "p90"), ("p99 ms", "p99"),
               (sweep_view.memory_label(report), "peak")]
    if gpu:
        columns += [("SM act.", "sm"), ("util", "util"), ("power", "power")]
    columns.append(("notes", "notes"))
    for header, _ in columns:
        numeric = header not in ("status", "notes")
        table.add_column(header, justify="right" if numeric else "left", no_wrap=numeric)
    for row in sweep_view.trial_rows(report):
        cells = [Text(row[key], style=STATUS_STYLE.get(row["status"], "red") if key == "status" else "")
                 for _, key in columns]
        if row["status"] != "ok" and row["short_message"]:
            cells[-1] = Text(row["short_message"], style="dim")  # the whole error is in the JSON and HTML
        table.add_row(*cells)
    return table


def render(report: SweepReport | Mapping[str, Any], console: Console, *,
           written: Mapping[str, str | Path] | None = None) -> None:
    report = as_sweep(report)
    console.print(Text(sweep_view.title(report), style="bold"))
    console.print(_table(report))
    why = sweep_view.gpu_unavailable(report)
    if why and report.on_gpu:
        console.print(Text(f"GPU activity not measured: {why}", style="dim"))
    if report.stop_reason:
        console.print(Text(f"Stopped: {report.stop_reason}", style="red" if report.failed else "dim"))
    for label, sentence in sweep_view.result_lines(report):
        line = Text(f"{label}: ", style="bold")
        line.append(sentence)
        console.print(line)
    for regime in ("offline", "online"):
        rec = report.recommendations.get(regime)
        if rec is None or not rec.text:
            continue
        console.print(Text(rec.text, style="cyan" if rec.batch_size else ""))
        if rec.code:
            console.print(Text(str(rec.code), style="dim"), soft_wrap=True)
    files = dict(written) if written is not None else dict(report.files)
    if files:
        console.print(Text("Written: " + ", ".join(str(p) for p in files.values()), style="dim"))


def to_text(report: SweepReport | Mapping[str, Any], width: int = 120) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None, force_terminal=False)
    render(report, console)
    return console.export_text()
