"""Words and numbers shared by the sweep renderers (terminal and HTML).

Everything reads the finished `gpudoctor.sweep/1` dict only. "Not measured" prints as
"-" in tables (with the reason elsewhere), never as zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpudoctor.metrics import format_bytes

DASH = "-"


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def rate(value: Any) -> str:
    if not _num(value):
        return DASH
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def ms(seconds: Any) -> str:
    if not _num(seconds):
        return DASH
    value = seconds * 1e3
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def percent(value: Any) -> str:
    return f"{value:.0f}%" if _num(value) else DASH


def size_bytes(value: Any) -> str:
    return format_bytes(float(value)) if _num(value) else DASH


def results(report: Mapping[str, Any]) -> Mapping[str, Any]:
    return report.get("results") or {}


def marks(report: Mapping[str, Any]) -> dict[int, list[str]]:
    """batch size -> labels: knee, memory edge, largest with headroom, latency limit."""
    res = results(report)
    out: dict[int, list[str]] = {}

    def add(size: Any, label: str) -> None:
        if isinstance(size, int):
            out.setdefault(size, []).append(label)

    add((res.get("knee") or {}).get("batch_size"), "knee")
    edge = res.get("memory_edge") or {}
    if edge.get("found"):
        add(edge.get("largest_fit"), "memory edge")
    add(edge.get("largest_fit_with_headroom"), f"fits with {edge.get('headroom', 0):.0%} headroom")
    latency = res.get("latency") or {}
    add(latency.get("largest_within"), "latency limit")
    return out


def trial_rows(report: Mapping[str, Any]) -> list[dict[str, str]]:
    budget = (report.get("settings") or {}).get("latency_p50_budget_s")
    labels = marks(report)
    rows = []
    for trial in report.get("trials") or []:
        timing = trial.get("timing") or {}
        memory = trial.get("memory") or {}
        gpu = trial.get("gpu") or {}
        size = trial.get("batch_size")
        notes = list(labels.get(size, [])) if trial.get("status") == "ok" else []
        if budget and _num(timing.get("latency_p50_s")) and timing["latency_p50_s"] > budget:
            notes.append("over latency budget")
        if trial.get("status") == "ok" and not timing.get("stable"):
            notes.append("not stable")
        power = gpu.get("power_w_mean")
        fraction = gpu.get("power_fraction")
        rows.append({
            "batch": str(size),
            "status": str(trial.get("status")),
            "message": str(trial.get("message") or ""),
            "throughput": rate(timing.get("samples_per_s")),
            "p50": ms(timing.get("latency_p50_s")),
            "p90": ms(timing.get("latency_p90_s")),
            "p99": ms(timing.get("latency_p99_s")),
            "allocated": size_bytes(memory.get("peak_allocated_bytes")),
            "reserved": size_bytes(memory.get("peak_reserved_bytes")),
            "peak": size_bytes(memory.get("peak_bytes")),
            "sm": percent(gpu.get("sm_activity_percent")),
            "util": percent(gpu.get("util_percent_mean")),
            "power": (f"{power:.0f} W" + (f" ({fraction:.0%})" if _num(fraction) else "")) if _num(power) else DASH,
            "iterations": str(timing.get("iterations", DASH)),
            "stable": ("yes" if timing.get("stable") else "no") if timing else DASH,
            "notes": ", ".join(notes),
        })
    return rows


def memory_label(report: Mapping[str, Any]) -> str:
    device = report.get("device") or {}
    return "peak reserved" if device.get("type") == "cuda" else "peak RSS"


def title(report: Mapping[str, Any]) -> str:
    target = report.get("target") or {}
    device = report.get("device") or {}
    name = device.get("name") or device.get("type") or "unknown device"
    return (f"Batch-size sweep of {target.get('spec', '?')} ({target.get('mode', '?')}, {target.get('dtype', '?')}) "
            f"on {name}")


def result_lines(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, sentence) for the headline results."""
    res = results(report)
    lines = []
    knee = res.get("knee") or {}
    if knee:
        lines.append(("Knee (throughput)", str(knee.get("reason", ""))))
    sm = res.get("knee_sm_activity")
    if sm:
        lines.append(("Knee (SM activity)", str(sm.get("reason", ""))))
    edge = res.get("memory_edge") or {}
    if edge:
        text = str(edge.get("reason", ""))
        fit = edge.get("largest_fit_with_headroom")
        if fit is not None:
            text += f"; largest measured size within {edge.get('headroom', 0):.0%} headroom: {fit}"
        per_sample = edge.get("per_sample_bytes")
        if _num(per_sample):
            text += f"; about {size_bytes(per_sample)} per sample"
        if edge.get("estimated_max_batch_with_headroom") is not None and not edge.get("found"):
            text += f"; estimated size at the headroom: {edge['estimated_max_batch_with_headroom']}"
        lines.append(("Memory", text))
    latency = res.get("latency")
    if latency:
        lines.append(("Latency", str(latency.get("reason", ""))))
    for note in report.get("observations") or []:
        lines.append(("Observed", str(note)))
    return lines


def gpu_unavailable(report: Mapping[str, Any]) -> str | None:
    """Why the GPU columns are empty, from the first trial that says."""
    for trial in report.get("trials") or []:
        if trial.get("gpu_unavailable"):
            return str(trial["gpu_unavailable"])
        gpu = trial.get("gpu") or {}
        reasons = gpu.get("unavailable") or {}
        if reasons.get("nvml"):
            return str(reasons["nvml"])
        if reasons.get("sm_activity_percent"):
            return f"SM activity: {reasons['sm_activity_percent']}"
    return None
