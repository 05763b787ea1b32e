"""Charts for the HTML report: matplotlib (Agg) figures as small inline SVG.

Each function returns an SVG string, or None when there is nothing measured to
draw (the template then says "not measured" and why; an empty chart would read as
zero). Text stays text (svg.fonttype 'none': no embedded glyphs), series are
thinned to a bounded number of points, and the XML prologue and namespace URLs are
removed so the report holds no URL at all. Labels are gpudoctor's own words;
values from the run only ever become coordinates.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib
import matplotlib.artist

# As its modules are imported, matplotlib writes the docstring of each Artist subclass's set()
# (matplotlib.artist.kwdoc inspects every setter and its valid values): a third of the import's
# time, for help() text no chart reads. Left out while the figure's modules import, then restored.
_KWDOC = matplotlib.artist.kwdoc
setattr(matplotlib.artist, "kwdoc", lambda artist: "")  # noqa: B010  (a module's function replaced a while)
try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
finally:
    setattr(matplotlib.artist, "kwdoc", _KWDOC)  # noqa: B010

MAX_POINTS = 400
COLORS = {  # Okabe-Ito: tells series apart for colour-blind readers and in print
    "util": "#E69F00",
    "sm": "#0072B2",
    "tensor": "#56B4E9",
    "cpu": "#009E73",
    "wait": "#D55E00",
    "power": "#CC79A7",
    "memory": "#000000",
    "compute": "#0072B2",
}
_RC: Any = {  # typed loosely: matplotlib's stubs want literal key types
    "svg.fonttype": "none",
    "svg.hashsalt": "gpudoctor",  # stable element ids: same data, same bytes
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
}
_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_NAMESPACES = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_UNSAFE = re.compile(r"<\s*(script|foreignObject|iframe|image|a)\b|\son\w+\s*=|javascript:", re.IGNORECASE)


def _styled(fn: Callable[..., str | None]) -> Callable[..., str | None]:
    """Run a chart function inside gpudoctor's rc settings: artists read them when
    they are created (tick labels, legends), not only when the figure is saved."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> str | None:
        with matplotlib.rc_context(_RC):
            return fn(*args, **kwargs)

    return wrapper


def _thin(xs: Sequence[Any], *series: Sequence[Any]) -> tuple[list[Any], ...]:
    """Every k-th point so a long run costs as many bytes as a short one."""
    n = len(xs)
    step = max(1, -(-n // MAX_POINTS))
    return (list(xs[::step]), *(list(s[::step]) for s in series))


def _present(values: Sequence[Any]) -> bool:
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _nan(values: Sequence[Any]) -> list[float]:
    """None (not measured) becomes a gap in the line, never a drop to zero."""
    return [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan") for v in values]


def to_svg(fig: Figure) -> str:
    buf = io.StringIO()
    with matplotlib.rc_context(_RC):  # svg.* settings are read at save time
        fig.savefig(buf, format="svg", bbox_inches="tight",
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = _NAMESPACES.sub("", _PROLOGUE.sub("", buf.getvalue(), count=1))
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.DOTALL)
    # drop the fixed size so the chart follows the page width (the viewBox keeps its shape)
    svg = re.sub(r'(<svg\b[^>]*?)\s+width="[^"]*"\s+height="[^"]*"', r"\1", svg, count=1)
    svg = svg.replace("<svg", '<svg role="img"', 1)
    if _UNSAFE.search(svg):  # matplotlib never emits these; refuse rather than embed
        raise ValueError("unexpected active content in chart SVG")
    return svg.strip()


def _figure(height: float, rows: int = 1) -> tuple[Figure, Any]:
    # Figure + the Agg canvas, never pyplot: headless, and no global backend or
    # figure registry changed in the process that renders (it may be the user's)
    fig = Figure(figsize=(8.0, height))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    return fig, axes


@_styled
def timeline(tl: Mapping[str, Any]) -> str | None:
    """GPU duty cycle vs SM/tensor activity vs CPU vs data wait (percent), power, memory."""
    gpu = tl.get("gpu") or {}
    cpu = tl.get("cpu") or {}
    percent: list[tuple[str, Sequence[Any], Sequence[Any], str]] = []
    for key, label, color in (
        ("util_percent", "GPU utilization (duty cycle)", "util"),
        ("sm_activity", "SM activity (real)", "sm"),
        ("tensor_activity", "tensor-core activity", "tensor"),
    ):
        if _present(gpu.get(key) or []):
            percent.append((label, gpu.get("t") or [], gpu[key], color))
    if _present(cpu.get("system_percent") or []):
        percent.append(("CPU (usable cores)", cpu.get("t") or [], cpu["system_percent"], "cpu"))
    step_t, share, _ = _wait_share(tl)
    if _present(share):
        percent.append(("data wait (share of step)", step_t, share, "wait"))
    power = gpu.get("power_w") or []
    memory = gpu.get("memory_used_bytes") or []
    panels = [p for p in ("percent" if percent else "", "power" if _present(power) else "",
                          "memory" if _present(memory) else "") if p]
    if not panels:
        return None
    heights = {"percent": 2.4, "power": 1.1, "memory": 1.1}
    fig, axes = _figure(sum(heights[p] for p in panels) + 0.4, len(panels))
    fig.set_layout_engine("constrained")
    for ax, panel in zip(axes, panels):
        if panel == "percent":
            for label, t, values, color in percent:
                x, y = _thin(t, values)
                ax.plot(x, _nan(y), label=label, color=COLORS[color], linewidth=1.1)
            ax.set_ylim(0, 105)
            ax.set_ylabel("%")
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        elif panel == "power":
            x, y = _thin(gpu.get("t") or [], power)
            ax.plot(x, _nan(y), color=COLORS["power"], linewidth=1.1, label="power")
            ax.set_ylabel("W")
            ax.set_ylim(bottom=0)
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        else:
            x, y = _thin(gpu.get("t") or [], memory)
            ax.plot(x, [v / 2**30 for v in _nan(y)], color=COLORS["memory"], linewidth=1.1, label="GPU memory used")
            ax.set_ylabel("GiB")
            ax.set_ylim(bottom=0)
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        ax.grid(True, linewidth=0.3, alpha=0.5)
    axes[len(panels) - 1].set_xlabel("seconds since start")
    return to_svg(fig)


@_styled
def step_breakdown(steps: Mapping[str, Any]) -> str | None:
    """Per-step time split into data wait and everything else (compute, launch, sync)."""
    t, durations, waits = steps.get("t") or [], steps.get("duration_s") or [], steps.get("data_wait_s") or []
    if not _present(durations):
        return None
    t, durations, waits = _thin(t, durations, waits)
    wait_ms = [1e3 * min(w or 0.0, d or 0.0) for w, d in zip(waits, durations)]
    busy_ms = [1e3 * (d or 0.0) - w for d, w in zip(durations, wait_ms)]
    fig, axes = _figure(1.8)
    ax = axes[0]
    ax.stackplot(t, wait_ms, busy_ms, labels=["data wait", "compute and the rest"],
                 colors=[COLORS["wait"], COLORS["compute"]], alpha=0.85, linewidth=0)
    ax.set_ylabel("ms per step")
    ax.set_xlabel("seconds since start")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.grid(True, linewidth=0.3, alpha=0.5)
    fig.set_layout_engine("constrained")
    return to_svg(fig)


@_styled
def kernel_histogram(hist: Mapping[str, Any]) -> str | None:
    """Kernel count per duration bucket, in the profiler's own bucket order."""
    items = [(str(k), v) for k, v in hist.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not items or not any(v for _, v in items):
        return None
    fig, axes = _figure(1.6)
    ax = axes[0]
    positions = list(range(len(items)))
    ax.bar(positions, [v for _, v in items], color=COLORS["sm"])
    ax.set_xticks(positions, [_safe_label(k) for k, _ in items], rotation=0)
    ax.set_ylabel("kernels")
    ax.set_xlabel("kernel duration")
    ax.grid(True, axis="y", linewidth=0.3, alpha=0.5)
    fig.set_layout_engine("constrained")
    return to_svg(fig)


def _safe_label(label: str) -> str:
    """Bucket labels come from the session file: keep them short and plain
    (matplotlib escapes XML, and '$' would start its math mode)."""
    cleaned = re.sub(r"[^A-Za-z0-9 .<>+\-]", "", label)[:14]
    return cleaned or "?"


@_styled
def diff_timeline(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str | None:
    """Before vs after over run time: real SM activity (or the duty cycle when SM
    activity was not measured) and the data-wait share of each step."""
    panels = []
    for title, pick in (("SM activity %", _sm_or_util), ("data wait, % of step", _wait_share)):
        lines = [(side, *pick(tl or {})) for side, tl in (("before", before), ("after", after))]
        lines = [ln for ln in lines if _present(ln[2])]
        if lines:
            panels.append((title, lines))
    if not panels:
        return None
    fig, axes = _figure(1.6 * len(panels) + 0.4, len(panels))
    fig.set_layout_engine("constrained")
    for ax, (title, lines) in zip(axes, panels):
        for side, t, values, label in lines:
            x, y = _thin(t, values)
            ax.plot(x, _nan(y), label=f"{side}: {label}", color=COLORS["util"] if side == "before" else COLORS["sm"],
                    linewidth=1.1)
        ax.set_ylabel(title)
        ax.set_ylim(0, 105)
        ax.grid(True, linewidth=0.3, alpha=0.5)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    axes[len(panels) - 1].set_xlabel("seconds since start")
    return to_svg(fig)


def _sm_or_util(tl: Mapping[str, Any]) -> tuple[Sequence[Any], Sequence[Any], str]:
    gpu = tl.get("gpu") or {}
    if _present(gpu.get("sm_activity") or []):
        return gpu.get("t") or [], gpu["sm_activity"], "SM activity"
    return gpu.get("t") or [], gpu.get("util_percent") or [], "GPU utilization"


def _wait_share(tl: Mapping[str, Any]) -> tuple[Sequence[Any], Sequence[Any], str]:
    steps = tl.get("steps") or {}
    share = [
        100.0 * min(w, d) / d if isinstance(w, (int, float)) and isinstance(d, (int, float)) and d > 0 else None
        for w, d in zip(steps.get("data_wait_s") or [], steps.get("duration_s") or [])
    ]
    return steps.get("t") or [], share, "data wait"
