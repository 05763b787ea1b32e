"""Words and numbers shared by the sweep renderers (terminal and HTML).

Everything reads the finished report only (gpudoctor.sweep.sweep_model.SweepReport). "Not measured" prints as
"-" in tables (with the reason elsewhere), never as zero.
"""

from __future__ import annotations

import re
from typing import Any

from gpudoctor.base.text import format_bytes
from gpudoctor.sweep.sweep_model import SweepReport, SweepResults, SweepTrial, TrialGpu, TrialTiming

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


def results(report: SweepReport) -> SweepResults:
    return report.results


def marks(report: SweepReport) -> dict[int, list[str]]:
    """batch size -> labels: knee, memory edge, largest with headroom, latency limit."""
    res = results(report)
    out: dict[int, list[str]] = {}

    def add(size: Any, label: str) -> None:
        if isinstance(size, int):
            out.setdefault(size, []).append(label)

    add(res.knee.batch_size, "knee")
    edge = res.memory_edge
    if edge.found:
        add(edge.largest_fit, "memory edge")
    add(edge.largest_fit_with_headroom, f"fits with {edge.headroom:.0%} headroom")
    if res.latency is not None:
        add(res.latency.largest_within, "latency limit")
    return out


# "Tried to allocate 2.25 GiB": what the CUDA caching allocator asked for when it failed
_ASKED = re.compile(r"Tried to allocate ([\d.]+ ?[KMGT]i?B)")
SHORT_MESSAGE_CHARS = 100


def short_message(status: str, message: str) -> str:
    """A trial's failure in a table cell or a progress line: "out of memory (2.25 GiB
    asked)" for an OOM, else the message's first line, cut short. The JSON and the HTML
    keep the whole text."""
    if status == "oom":
        asked = _ASKED.search(message)
        return f"out of memory ({asked.group(1)} asked)" if asked else "out of memory"
    first = next((line.strip() for line in message.splitlines() if line.strip()), "")
    return first if len(first) <= SHORT_MESSAGE_CHARS else first[: SHORT_MESSAGE_CHARS - 3] + "..."


def _trial_notes(trial: SweepTrial, labels: list[str], budget: float | None) -> list[str]:
    """The notes cell: the curve's marks, a latency over budget, and how the size was run."""
    timing = trial.timing if not trial.fit_probe else None
    notes = list(labels) if trial.status == "ok" else []
    if budget and timing is not None and _num(timing.latency_p50_s) and timing.latency_p50_s > budget:
        notes.append("over latency budget")
    if trial.fit_probe and trial.fit_check is not None:
        autotune = (", cuDNN autotuning off" if trial.fit_check.cudnn_benchmark_target
                    and not trial.fit_check.cudnn_benchmark else "")
        notes.append(f"fit check: memory only ({trial.fit_check.steps} steps, not timed{autotune})")
    elif trial.fit_probe:
        notes.append("fit probe: memory only, throughput not measured")
    elif trial.status == "ok" and not (timing is not None and timing.stable):
        notes.append("not stable")
    return notes


def _timing_cells(timing: TrialTiming | None) -> dict[str, str]:
    """Throughput, latency percentiles, iterations and stability (dashes for a size not timed)."""
    if timing is None:
        return {"throughput": rate(None), "p50": ms(None), "p90": ms(None), "p99": ms(None),
                "iterations": DASH, "stable": DASH}
    return {"throughput": rate(timing.samples_per_s), "p50": ms(timing.latency_p50_s),
            "p90": ms(timing.latency_p90_s), "p99": ms(timing.latency_p99_s),
            "iterations": str(timing.iterations), "stable": "yes" if timing.stable else "no"}


def _gpu_cells(gpu: TrialGpu | None) -> dict[str, str]:
    """SM activity, utilization and power (dashes where the GPU was not read)."""
    power = gpu.power_w_mean if gpu is not None else None
    fraction = gpu.power_fraction if gpu is not None else None
    return {
        "sm": percent(gpu.sm_activity_percent if gpu is not None else None),
        "util": percent(gpu.util_percent_mean if gpu is not None else None),
        "power": (f"{power:.0f} W" + (f" ({fraction:.0%})" if _num(fraction) else "")) if _num(power) else DASH,
    }


def trial_rows(report: SweepReport) -> list[dict[str, str]]:
    budget = report.settings.latency_p50_budget_s
    labels = marks(report)
    rows = []
    for trial in report.trials:
        timing = trial.timing if not trial.fit_probe else None  # a probe's few iterations are no measurement
        memory = trial.memory
        cells = {**_timing_cells(timing), **_gpu_cells(trial.gpu)}
        rows.append({
            "batch": str(trial.batch_size),
            "status": str(trial.status),
            "message": str(trial.message or ""),
            "short_message": short_message(str(trial.status), str(trial.message or "")),
            "throughput": cells["throughput"],
            "p50": cells["p50"],
            "p90": cells["p90"],
            "p99": cells["p99"],
            "allocated": size_bytes(memory.peak_allocated_bytes),
            "reserved": size_bytes(memory.peak_reserved_bytes),
            "peak": size_bytes(memory.peak_bytes),
            "sm": cells["sm"],
            "util": cells["util"],
            "power": cells["power"],
            "iterations": cells["iterations"],
            "stable": cells["stable"],
            "notes": ", ".join(_trial_notes(trial, labels.get(trial.batch_size, []), budget)),
        })
    return rows


def memory_label(report: SweepReport) -> str:
    return "peak reserved" if report.on_gpu else "peak RSS"


def title(report: SweepReport) -> str:
    target = report.target
    name = report.device.get("name") or report.device.get("type") or "unknown device"
    return f"Batch-size sweep of {target.spec} ({target.mode}, {target.dtype}) on {name}"


def result_lines(report: SweepReport) -> list[tuple[str, str]]:
    """(label, sentence) for the headline results."""
    res = results(report)
    lines = [("Knee (throughput)", res.knee.reason)]
    if res.knee_sm_activity is not None:
        lines.append(("Knee (SM activity)", res.knee_sm_activity.reason))
    edge = res.memory_edge
    text = edge.reason
    if edge.largest_fit_with_headroom is not None:
        text += f"; largest measured size within {edge.headroom:.0%} headroom: {edge.largest_fit_with_headroom}"
    if _num(edge.per_sample_bytes):
        text += f"; about {size_bytes(edge.per_sample_bytes)} per sample"
    if edge.estimated_max_batch_with_headroom is not None and not edge.found:
        text += f"; estimated size at the headroom: {edge.estimated_max_batch_with_headroom}"
    lines.append(("Memory", text))
    if res.latency is not None:
        lines.append(("Latency", res.latency.reason))
    for note in report.observations:
        lines.append(("Observed", str(note)))
    return lines


def gpu_unavailable(report: SweepReport) -> str | None:
    """Why the GPU columns are empty, from the first trial that says."""
    for trial in report.trials:
        if trial.gpu_unavailable:
            return str(trial.gpu_unavailable)
        reasons = trial.gpu.unavailable if trial.gpu is not None else {}
        if reasons.get("nvml"):
            return str(reasons["nvml"])
        if reasons.get("sm_activity_percent"):
            return f"SM activity: {reasons['sm_activity_percent']}"
    return None
