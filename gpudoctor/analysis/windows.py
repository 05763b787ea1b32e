"""Naming a profiled window for the reader, and its hotspots as the report shows them.

Shared by the checks (which window a finding comes from) and the report builder (the
hotspot table: operators by their own CPU time, kernels by GPU time, and the Python
call sites that launched the most GPU work, blocked the most or cost the most CPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpudoctor.session import ProfileSummary

TOP = 8


def window_name(profile: ProfileSummary) -> str:
    """'profiled window (10 steps)', or with its number and label when the run had several."""
    if profile.steps:
        size = f"{profile.steps} steps"
    elif profile.window_s:
        size = f"{profile.window_s:.2f} s, no step boundaries"
    else:
        size = ""
    which = f" {profile.index}" if profile.index else ""
    inside = ", ".join(p for p in (profile.label if profile.index else None, size) if p)
    return f"profiled window{which}" + (f" ({inside})" if inside else "")


def describe_window(profile: ProfileSummary) -> str:
    """Which window, its phase and when: for the report's 'window' line."""
    text = window_name(profile)
    if profile.phase:
        text += f": {profile.phase}"
    if profile.window_start_s is not None and profile.window_end_s is not None:
        text += f", {profile.window_start_s:.1f}-{profile.window_end_s:.1f} s into the run"
    return text


def window_seconds(profile: ProfileSummary) -> float | None:
    """The window's length, for per-second rates when it has no steps."""
    if profile.window_s and profile.window_s > 0:
        return profile.window_s
    span = (profile.gpu_busy_us + profile.gpu_idle_us) / 1e6
    return span if span > 0 else None


def hotspots(profile: ProfileSummary, top: int = TOP) -> dict[str, Any]:
    """The hotspot table of one window: plain data for the JSON report and the renderers."""
    window_us = profile.window_s * 1e6 if profile.window_s else None
    kernel_us = profile.kernel_total_us
    gpu_us = sum(s.gpu_us for s in profile.call_sites)
    return {
        "window": describe_window(profile),
        "name": window_name(profile),
        "label": profile.label,
        "index": profile.index,
        "cpu_ops": [{"name": op.name, "count": op.count, "self_us": op.total_us,
                     "share_of_window": _share(op.total_us, window_us)} for op in profile.top_cpu_ops[:top]],
        "kernels": [{"name": k.name, "count": k.count, "total_us": k.total_us,
                     "share_of_kernel_time": _share(k.total_us, kernel_us)} for k in profile.top_kernels[:top]],
        "call_sites": [{"site": s.site, "gpu_us": s.gpu_us, "gpu_share": _share(s.gpu_us, gpu_us),
                        "launches": s.launches, "blocked_us": s.blocked_us, "syncs": s.syncs, "cpu_us": s.cpu_us}
                       for s in profile.call_sites[:top]],
    }


def _share(part: float, whole: float | None) -> float | None:
    return round(part / whole, 4) if whole and whole > 0 else None
