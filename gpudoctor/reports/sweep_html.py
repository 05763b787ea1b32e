"""The sweep's HTML report: one self-contained file, curves and answers.

jinja2 with autoescaping renders templates/sweep.html. No script and no network
request: styles are inline, charts are inline SVG, and the Content-Security-Policy
meta tag forbids everything else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from gpudoctor.base.text import format_duration
from gpudoctor.sweep.sweep_model import SweepReport, as_sweep

from . import sweep_charts, sweep_view
from ._common import argv_line

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def _chart(fn: Callable[[SweepReport], str | None], report: SweepReport) -> Markup | None:
    """matplotlib's SVG (checked by charts.to_svg) as markup; a failed chart costs one picture."""
    try:
        svg = fn(report)
    except Exception as exc:  # noqa: BLE001 (one picture lost, never the report)
        log.warning("sweep chart %s failed: %s", fn.__name__, exc)
        return None
    return Markup(svg) if svg else None


def _environment_rows(report: SweepReport) -> list[tuple[str, str]]:
    device = report.device
    env = report.environment
    rows = [("Device", str(device.get("name") or device.get("type") or "unknown"))]
    if device.get("total_memory_bytes"):
        rows.append(("Device memory", sweep_view.size_bytes(device["total_memory_bytes"])))
    for key, label in (("torch", "torch"), ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("driver", "driver"),
                       ("python", "Python"), ("platform", "platform"), ("cpu_count", "CPUs")):
        if env.get(key) is not None:
            rows.append((label, str(env[key])))
    notes = env.get("notes") or []
    if notes:
        rows.append(("Defaults used", "; ".join(str(n) for n in notes)))
    return rows


def context(report: SweepReport | Mapping[str, Any]) -> dict[str, Any]:
    report = as_sweep(report)
    settings = report.settings
    recs = report.recommendations
    return {
        "csp": CSP,
        "report": report,
        "title": sweep_view.title(report),
        "command": argv_line(report.command),
        "duration": format_duration(float(report.duration_s or 0)),
        "gpu": report.on_gpu,
        "memory_label": sweep_view.memory_label(report),
        "rows": sweep_view.trial_rows(report),
        "results": sweep_view.result_lines(report),
        "recommendations": [recs[k] for k in ("offline", "online") if recs.get(k)],
        "stability": settings.stability.rule,
        "settings": settings,
        "gpu_missing": sweep_view.gpu_unavailable(report),
        "environment_rows": _environment_rows(report),
        "throughput_svg": _chart(sweep_charts.throughput, report),
        "latency_svg": _chart(sweep_charts.latency, report),
        "memory_svg": _chart(sweep_charts.memory, report),
        "activity_svg": _chart(sweep_charts.gpu_activity, report),
        "files": report.files,
    }


def render(report: SweepReport | Mapping[str, Any]) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.ChainableUndefined,  # defensive: an unknown name renders empty, never fails
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("sweep.html").render(**context(report))
