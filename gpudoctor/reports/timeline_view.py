"""The profiled window's picture in the HTML report: rows of spans, idle gaps by cause, the what-if.

Reads the report only: ``evidence.profile.picture`` (collectors/window_picture.py), the
per-cause idle time ``evidence.profile.idle_by_cause_us``, the replay's pictures of the same
steps (``evidence.profile.replay``) and the findings' predictions. Everything is laid out here
as numbers and SVG path data (``M x y h w v h h -w z``: digits and letters only); the template
(templates/_timeline.html) writes the markup with autoescaping.

The drawing is one SVG, 1000 units wide for the longest row (``preserveAspectRatio="none"``,
so the page's script zooms and pans by changing its viewBox) and one unit per pixel high.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

from gpudoctor.base.idle_causes import CAUSE_LABELS, IDLE_CAUSES, SCENARIO_CAUSES
from gpudoctor.base.jsonmodel import finite_numbers, is_real
from gpudoctor.base.text import format_duration
from gpudoctor.verdict.report_model import Report, ReportFinding

WIDTH = 1000.0
ROW = 14.0  # row height
PITCH = 20.0  # row to row
BINS = 1500  # a replayed picture's bins: its span / BINS wide (collectors/window_picture.BINS)



def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _real(value: Any) -> float | None:
    return float(value) if is_real(value) else None


def _share(part: float, whole: float) -> str:
    """'34%'; never a rounded '0%' or '100%' for a part that is neither."""
    if whole <= 0:
        return ""
    share = part / whole
    if 0 < share < 0.005:
        return "<1%"
    if 0.995 <= share < 1:
        return ">99%"
    return f"{share:.0%}"


def _us(value: float) -> str:
    return format_duration(max(0.0, value) / 1e6)


def _numbers(values: Any) -> list[float]:
    if isinstance(values, list) and (finite_numbers(values) or all(is_real(v) for v in values)):
        return list(map(float, values))
    return []


class _Scale:
    def __init__(self, span_us: float) -> None:
        self.factor = WIDTH / span_us if span_us > 0 else 0.0

    def x(self, us: float) -> float:
        return round(us * self.factor, 3)


def _path(spans: Sequence[float], scale: _Scale, y: float, height: float = ROW) -> str:
    """One path of rectangles for start, length pairs (the pairs as zip gives them: an odd last
    value left out). A span shorter than the width still shows (as scale.x, then 0.05 at least).

    Tens of thousands of spans (a copy's) are only a few widths: each width's text is made once."""
    factor = scale.factor
    pairs = len(spans) // 2
    starts = map("M%g".__mod__, map(round, map(factor.__mul__, spans[0:2 * pairs:2]), repeat(3)))
    widths = map(max, map(round, map(factor.__mul__, spans[1:2 * pairs:2]), repeat(3)), repeat(0.05))
    top, tall = f" {y:g}h", f"v{height:g}h"
    shapes: dict[float, str] = {}  # the text after a rectangle's x, by its width

    def shape(w: float) -> str:
        text = shapes[w] = f"{top}{w:g}{tall}{-w:g}z"
        return text

    known = shapes.get
    return "".join([start + (known(w) or shape(w)) for start, w in zip(starts, widths)])


def _bars(pairs: Sequence[float], bin_us: float, scale: _Scale, y: float) -> str:
    """One path of bars for bin, us pairs: the time in spans too short to draw, each bar as high
    as the share of its bin they fill."""
    parts = []
    width = max(scale.x(bin_us), 0.05)
    for i in range(0, len(pairs) - 1, 2):
        height = round(ROW * min(1.0, pairs[i + 1] / bin_us), 2) if bin_us > 0 else 0.0
        if height > 0:
            parts.append(f"M{scale.x(pairs[i] * bin_us):g} {y + ROW - height:g}h{width:g}v{height:g}h{-width:g}z")
    return "".join(parts)


def _bins_paths(bins: Mapping[str, Any], bin_us: float, scale: _Scale, y: float) -> list[tuple[str, str]]:
    """(cause, path): the idle time of the gaps too short to draw, stacked per bin, its height
    the share of the bin that was idle."""
    stacked: dict[int, float] = {}
    out = []
    for cause in IDLE_CAUSES:
        values = _numbers(bins.get(cause))
        parts = []
        for i, value in enumerate(values):
            if value <= 0 or bin_us <= 0:
                continue
            height = round(ROW * min(1.0, value / bin_us), 2)
            below = stacked.get(i, 0.0)
            height = min(height, ROW - below)
            if height <= 0:
                continue
            stacked[i] = below + height
            x, w = scale.x(i * bin_us), max(scale.x(bin_us), 0.05)
            parts.append(f"M{x:g} {y + ROW - below - height:g}h{w:g}v{height:g}h{-w:g}z")
        if parts:
            out.append((cause, "".join(parts)))
    return out


def _finding_cause(f: ReportFinding) -> str | None:
    scenario = f.prediction.scenario if f.prediction else None
    return SCENARIO_CAUSES.get(scenario) if scenario else None


def _whatif(report: Report, replay: Mapping[str, Any]) -> dict[str, Any] | None:
    """The top finding whose replay scenario was drawn: its scenario's picture beside the baseline's."""
    scenarios = {s.get("name"): s for s in replay.get("scenarios") or [] if isinstance(s, Mapping)}
    for f in report.root_causes():
        scenario = f.prediction.scenario if f.prediction else None
        row = scenarios.get(scenario) if scenario else None
        if row and is_real(row.get("picture_span_us")) and row.get("picture_span_us"):
            return {"finding": f.id, "label": row.get("label") or scenario, "scenario": scenario,
                    "span_us": float(row["picture_span_us"]), "spans": _numbers(row.get("picture")),
                    "bins": _numbers(row.get("picture_bins"))}
    return None


def timeline_views(report: Report) -> list[dict[str, Any]]:
    """One view per profiled window with a picture: the primary window first (the findings link
    to its gaps), then the others (evidence.profiles)."""
    primary = _mapping(report.evidence.get("profile"))
    views = []
    first = _one(report, primary, "timeline")
    if first is not None:
        views.append(first)
    for profile in report.evidence.get("profiles") or []:
        profile = _mapping(profile)
        if not profile or profile.get("index") == primary.get("index") or profile is primary:
            continue
        view = _one(report, profile, f"timeline-{profile.get('index')}")
        if view is not None:
            label = f" ({profile['label']})" if profile.get("label") else ""
            view["window"] = f"window {profile.get('index')}{label}"
            views.append(view)
    return views


def _one(report: Report, profile: Mapping[str, Any], ident: str) -> dict[str, Any] | None:
    if not profile:
        return None
    picture = profile.get("picture")
    if not isinstance(picture, Mapping) or not is_real(picture.get("span_us")) or not picture.get("span_us"):
        return None
    span = float(picture["span_us"])
    replay = _mapping(profile.get("replay"))
    whatif = _whatif(report, replay) if replay and not replay.get("error") else None
    baseline_span = _real(replay.get("baseline_picture_span_us")) if whatif else None
    longest = max([span] + ([baseline_span, whatif["span_us"]] if whatif and baseline_span else []))
    scale = _Scale(longest)
    rows, y = _rows(picture, scale)
    idle_y = y
    y += PITCH
    bin_us = float(picture.get("bin_us") or 0.0)
    bins = _bins_paths(picture.get("idle_bins") or {}, bin_us, scale, idle_y) \
        if isinstance(picture.get("idle_bins"), Mapping) else []
    marks = [scale.x(m) for m in _numbers(picture.get("step_marks"))]
    whatif_rows: list[dict[str, Any]] = []
    if whatif and baseline_span:
        whatif_rows, y = _whatif_rows(whatif, replay, baseline_span, scale, y + 6)
    steps = int(picture.get("steps") or 0)
    return {
        "id": ident,
        "window": None,
        "height": y,
        "width": WIDTH,
        "rows": rows,
        "idle_y": idle_y,
        "idle_label_y": idle_y + ROW - 3,
        "row_height": ROW,
        "gaps": _gaps(picture, scale),
        "bins": bins,
        "marks": marks,
        "span": _us(span),
        "longest_us": longest,
        "scope": f"the last {steps} steps of the window" if steps else "the whole window (no step boundaries)",
        "legend": _legend(profile),
        "drawn_idle": {str(k): _us(float(v)) for k, v in (picture.get("idle_by_cause_us") or {}).items()
                       if is_real(v)},
        "whatif": whatif,
        "whatif_rows": whatif_rows,
        "links": _links(report, picture),
    }


def _rows(picture: Mapping[str, Any], scale: _Scale) -> tuple[list[dict[str, Any]], float]:
    """The picture's rows (threads and streams), top down; the y below the last."""
    rows: list[dict[str, Any]] = []
    y = 0.0
    for row in picture.get("rows") or []:
        if not isinstance(row, Mapping):
            continue
        kind = str(row.get("kind") or "cpu")
        rows.append({"name": str(row.get("name") or ""), "kind": kind, "y": y, "label_y": y + ROW - 3,
                     "path": _path(_numbers(row.get("spans")), scale, y)
                     + _bars(_numbers(row.get("bins")), float(picture.get("bin_us") or 0.0), scale, y),
                     "copies": _path(_numbers(row.get("copies")), scale, y)})
        y += PITCH
    return rows, y


def _gaps(picture: Mapping[str, Any], scale: _Scale) -> list[dict[str, Any]]:
    """The GPU's idle gaps (start, length, cause code, launch site: four numbers each), drawn."""
    gaps, sites = _numbers(picture.get("gaps")), [str(s) for s in picture.get("sites") or []]
    drawn = []
    for i in range(0, len(gaps) - 3, 4):
        start, length, code, site = gaps[i:i + 4]
        cause = IDLE_CAUSES[int(code)] if 0 <= int(code) < len(IDLE_CAUSES) else "unexplained"
        where = sites[int(site) - 1] if 0 < int(site) <= len(sites) else None
        title = f"idle {_us(length)}: {CAUSE_LABELS[cause]}" + (f", launched from {where}" if where else "")
        drawn.append({"x": scale.x(start), "w": max(scale.x(length), 0.05), "cause": cause, "title": title})
    return drawn


def _whatif_rows(whatif: dict[str, Any], replay: Mapping[str, Any], baseline_span: float, scale: _Scale,
                 y: float) -> tuple[list[dict[str, Any]], float]:
    """The replay as is and the what-if, one row each from `y`; the y below them. Sets the
    what-if's gain (replayed span / what-if span)."""
    removed = SCENARIO_CAUSES.get(whatif["scenario"])
    without = f"what-if: no {CAUSE_LABELS[removed]}" if removed else f"what-if: {whatif['scenario']}"
    rows = []
    for name, spans, short, length in (
            ("what-if: replayed as is", _numbers(replay.get("baseline_picture")),
             _numbers(replay.get("baseline_picture_bins")), baseline_span),
            (without, whatif["spans"], whatif["bins"], whatif["span_us"])):
        rows.append({"name": name, "y": y, "label_y": y + ROW - 3,
                     "path": _path(spans, scale, y) + _bars(short, length / BINS, scale, y),
                     "end": scale.x(length), "length": _us(length)})
        y += PITCH
    whatif["gain"] = baseline_span / whatif["span_us"] if whatif["span_us"] else None
    return rows, y


def _legend(profile: Mapping[str, Any]) -> dict[str, Any]:
    idle = float(profile.get("gpu_idle_us") or 0.0)
    busy = float(profile.get("gpu_busy_us") or 0.0)
    by_cause = _mapping(profile.get("idle_by_cause_us"))
    rows: list[dict[str, Any]] = []
    for cause in IDLE_CAUSES:
        value = _real(by_cause.get(cause))
        if value is not None and value > 0:
            rows.append({"cause": cause, "label": CAUSE_LABELS[cause], "us": value, "time": _us(value),
                         "share": _share(value, idle)})
    rows.sort(key=lambda r: -float(r["us"]))  # the largest cause first
    return {"rows": rows, "idle_us": idle, "idle": _us(idle),
            "idle_share": _share(idle, idle + busy)}


def _links(report: Report, picture: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """finding id -> the cause of the gaps it explains, and how much of the drawn idle time they are."""
    drawn = _mapping(picture.get("idle_by_cause_us"))
    out = {}
    for f in report.findings:
        cause = _finding_cause(f)
        time = _real(drawn.get(cause)) if cause else None
        if cause and f.id and time:
            out[f.id] = {"cause": cause, "label": CAUSE_LABELS[cause], "time": _us(time)}
    return out
