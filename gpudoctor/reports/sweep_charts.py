"""Charts of the sweep: throughput, latency, memory and GPU activity against batch size.

matplotlib (Agg, never pyplot) to inline SVG through reports.charts.to_svg (no URL,
no script, stable bytes). Batch size is on a log2 axis; every chart marks the knee
(dashed) and the memory edge (the largest size that fit, solid; out-of-memory sizes
shaded), so the reader sees where the curve flattens and where it ends.
Each function returns None when there is nothing measured to draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from gpudoctor.sweep.sweep_model import SweepReport, SweepTrial, TrialTiming

from .charts import _RC, COLORS, to_svg

GIB = 2**30
KNEE_COLOR = "#009E73"
EDGE_COLOR = "#D55E00"
BUDGET_COLOR = "#CC79A7"


def _ok(report: SweepReport, probes: bool = False) -> list[SweepTrial]:
    """The sizes that ran; fit probes (their memory counts, not their timing) with `probes`."""
    return [t for t in report.trials if t.status == "ok" and t.timing is not None and (probes or not t.fit_probe)]


def _timing(trial: SweepTrial) -> TrialTiming:
    assert trial.timing is not None  # _ok's trials only
    return trial.timing


def _figure(height: float = 2.6) -> tuple[Figure, Any]:
    fig = Figure(figsize=(8.0, height))
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def _batch_axis(ax: Any, report: SweepReport, sizes: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    all_sizes = sorted({int(t.batch_size) for t in report.trials} | set(sizes))
    # label powers of two (bisection points would crowd the axis) plus the ends
    labelled = [s for s in all_sizes if s & (s - 1) == 0 or s in (all_sizes[0], all_sizes[-1])]
    ax.xaxis.set_major_locator(FixedLocator(labelled))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(s) for s in labelled])
    ax.set_xlabel("batch size")
    ax.grid(True, linewidth=0.3, alpha=0.5)


def _marks(ax: Any, report: SweepReport) -> None:
    res = report.results
    knee = res.knee.batch_size
    if knee:
        ax.axvline(knee, color=KNEE_COLOR, linestyle="--", linewidth=1.2, label=f"knee ({knee})")
    edge = res.memory_edge
    if edge.found:
        ax.axvline(edge.largest_fit, color=EDGE_COLOR, linewidth=1.2, label=f"memory edge ({edge.largest_fit})")
    ooms = [int(t.batch_size) for t in report.trials if t.status == "oom"]
    if ooms:
        lo, hi = ax.get_xlim()
        start = min(ooms)
        ax.axvspan(start, max(hi, max(ooms) * 1.2), color=EDGE_COLOR, alpha=0.12, linewidth=0, label="out of memory")
        ax.set_xlim(lo, max(hi, max(ooms) * 1.2))


def _finish(fig: Figure, ax: Any) -> str:
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.set_layout_engine("constrained")
    return to_svg(fig)


def throughput(report: SweepReport) -> str | None:
    trials = _ok(report)
    if not trials:
        return None
    with matplotlib.rc_context(_RC):
        sizes = [int(t.batch_size) for t in trials]
        fig, ax = _figure()
        ax.plot(sizes, [_timing(t).samples_per_s for t in trials], marker="o", markersize=3,
                color=COLORS["compute"], linewidth=1.4, label="throughput")
        _batch_axis(ax, report, sizes)
        ax.set_ylabel("samples / s")
        ax.set_ylim(bottom=0)
        _marks(ax, report)
        sm = [(int(t.batch_size), t.gpu.sm_activity_percent if t.gpu is not None else None) for t in trials]
        sm = [(s, v) for s, v in sm if isinstance(v, (int, float))]
        if sm:
            twin = ax.twinx()
            twin.plot([s for s, _ in sm], [v for _, v in sm], color=COLORS["sm"], linestyle=":", marker=".",
                      linewidth=1.1, label="SM activity (right, %)")
            twin.set_ylim(0, 105)
            twin.set_ylabel("SM activity %")
            handles, labels = ax.get_legend_handles_labels()
            more, more_labels = twin.get_legend_handles_labels()
            twin.spines["right"].set_visible(True)
            ax.legend(handles + more, labels + more_labels, loc="upper left", bbox_to_anchor=(1.08, 1.0), frameon=False)
            fig.set_layout_engine("constrained")
            return to_svg(fig)
        return _finish(fig, ax)


def latency(report: SweepReport) -> str | None:
    trials = _ok(report)
    if not trials:
        return None
    with matplotlib.rc_context(_RC):
        sizes = [int(t.batch_size) for t in trials]
        fig, ax = _figure()
        for key, label, style in (("latency_p50_s", "p50", "-"), ("latency_p90_s", "p90", "--"),
                                  ("latency_p99_s", "p99", ":")):
            values = [getattr(_timing(t), key) * 1e3 for t in trials]
            ax.plot(sizes, values, linestyle=style, marker="o", markersize=2.5,
                    color=COLORS["wait"] if label == "p50" else COLORS["util"], linewidth=1.2, label=label)
        _batch_axis(ax, report, sizes)
        ax.set_yscale("log")
        ax.set_ylabel("latency per batch, ms")
        budget = report.settings.latency_p50_budget_s
        if budget:
            ax.axhline(budget * 1e3, color=BUDGET_COLOR, linewidth=1.1, label=f"p50 budget ({budget * 1e3:g} ms)")
        _marks(ax, report)
        return _finish(fig, ax)


def memory(report: SweepReport) -> str | None:
    trials = [t for t in _ok(report, probes=True) if t.memory.peak_bytes is not None]
    if not trials:
        return None
    with matplotlib.rc_context(_RC):
        sizes = [int(t.batch_size) for t in trials]
        fig, ax = _figure(2.2)
        cuda = report.on_gpu
        ax.plot(sizes, [(t.memory.peak_bytes or 0) / GIB for t in trials], marker="o", markersize=3,
                color=COLORS["memory"], linewidth=1.2, label="peak reserved" if cuda else "peak RSS")
        allocated = [(int(t.batch_size), t.memory.peak_allocated_bytes) for t in trials
                     if t.memory.peak_allocated_bytes is not None]
        if allocated:
            ax.plot([s for s, _ in allocated], [v / GIB for _, v in allocated], marker=".", linestyle="--",
                    color=COLORS["tensor"], linewidth=1.0, label="peak allocated")
        edge = report.results.memory_edge
        capacity = edge.capacity_bytes
        if capacity:
            ax.axhline(capacity / GIB, color=EDGE_COLOR, linewidth=1.0, label="capacity")
            ax.axhline(capacity * (1 - edge.headroom) / GIB, color=EDGE_COLOR, linestyle=":",
                       linewidth=1.0, label=f"{edge.headroom:.0%} headroom")
        _batch_axis(ax, report, sizes)
        ax.set_ylabel("GiB")
        ax.set_ylim(bottom=0)
        _marks(ax, report)
        return _finish(fig, ax)


def gpu_activity(report: SweepReport) -> str | None:
    series: dict[str, list[tuple[int, float]]] = {"util": [], "sm": [], "power": []}
    for t in _ok(report):
        gpu = t.gpu
        if gpu is None:
            continue
        for key, field in (("util", "util_percent_mean"), ("sm", "sm_activity_percent")):
            value = getattr(gpu, field)
            if isinstance(value, (int, float)):
                series[key].append((int(t.batch_size), float(value)))
        if isinstance(gpu.power_fraction, (int, float)):
            series["power"].append((int(t.batch_size), 100.0 * gpu.power_fraction))
    if not any(series.values()):
        return None
    with matplotlib.rc_context(_RC):
        fig, ax = _figure(2.2)
        labels = {"util": "utilization (duty cycle)", "sm": "SM activity", "power": "power, % of limit"}
        for key, points in series.items():
            if points:
                ax.plot([s for s, _ in points], [v for _, v in points], marker="o", markersize=2.5,
                        color=COLORS[key], linewidth=1.2, label=labels[key])
        ax.axhspan(80, 90, color=COLORS["power"], alpha=0.1, linewidth=0, label="power 80-90%: near fully used")
        sizes = sorted({s for points in series.values() for s, _ in points})
        _batch_axis(ax, report, sizes)
        ax.set_ylim(0, 105)
        ax.set_ylabel("%")
        _marks(ax, report)
        return _finish(fig, ax)
