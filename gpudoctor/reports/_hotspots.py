"""The hotspot table and the profiled windows, as the renderers show them.

Reads only the finished report (its free-JSON evidence section: ``evidence.hotspots``: one table per profiled window,
the primary first; ``evidence.profiles``: the windows' statistics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpudoctor.base.jsonmodel import is_real
from gpudoctor.base.text import format_duration
from gpudoctor.verdict.report_model import Report

NAME_CHARS = 48


def _short(name: Any, limit: int = NAME_CHARS) -> str:
    text = " ".join(str(name).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ms(us: Any) -> str:
    return format_duration(float(us) / 1e6) if is_real(us) else "n/a"


def _pct(share: Any) -> str:
    return f"{share:.0%}" if is_real(share) else "n/a"


def tables(report: Report) -> list[Mapping[str, Any]]:
    return [t for t in report.evidence.get("hotspots") or [] if isinstance(t, Mapping)]


def hotspot_line(report: Report) -> str | None:
    """One line for the terminal: the top kernel, operator and call sites of the primary window."""
    found = tables(report)
    if not found:
        return None
    table = found[0]
    parts = []
    kernels = table.get("kernels") or []
    if kernels:
        k = kernels[0]
        parts.append(f"kernel {_short(k.get('name'))} {_pct(k.get('share_of_kernel_time'))} of kernel time")
    ops = table.get("cpu_ops") or []
    if ops:
        parts.append(f"CPU op {_short(ops[0].get('name'), 32)} {_ms(ops[0].get('self_us'))} self")
    sites = table.get("call_sites") or []
    launcher = max(sites, key=lambda s: s.get("gpu_us") or 0, default=None)
    if launcher and launcher.get("gpu_us"):
        parts.append(f"{_short(launcher.get('site'))} launches {_pct(launcher.get('gpu_share'))} of GPU time")
    blocker = max(sites, key=lambda s: s.get("blocked_us") or 0, default=None)
    if blocker and blocker.get("blocked_us"):
        parts.append(f"{_short(blocker.get('site'))} blocks {_ms(blocker.get('blocked_us'))}")
    if not launcher or not launcher.get("gpu_us"):
        busiest = max(sites, key=lambda s: s.get("cpu_us") or 0, default=None)
        if busiest and busiest.get("cpu_us"):
            parts.append(f"{_short(busiest.get('site'))} {_ms(busiest.get('cpu_us'))} CPU in operators")
    if not parts:
        return None
    more = (f" (+{len(found) - 1} more window{'s' if len(found) > 2 else ''} in the HTML report)"
            if len(found) > 1 else "")
    return f"Hotspots ({table.get('name') or 'profiled window'}): " + "; ".join(parts) + more


def windows_view(report: Report) -> list[dict[str, Any]]:
    """Per window: its description, headline numbers and hotspot rows, for the HTML report."""
    profiles = [p for p in report.evidence.get("profiles") or [] if isinstance(p, Mapping)]
    by_index = {p.get("index"): p for p in profiles}
    views = []
    for table in tables(report):
        profile = by_index.get(table.get("index")) or {}
        busy, idle = float(profile.get("gpu_busy_us") or 0.0), float(profile.get("gpu_idle_us") or 0.0)
        views.append({
            "window": table.get("window") or "profiled window",
            "summary": ", ".join(x for x in (
                f"{int(profile.get('kernel_count') or 0):,} kernels" if profile else "",
                f"GPU busy {busy / (busy + idle):.0%}" if busy + idle > 0 else "",
                f"{int(profile.get('sync_count') or 0):,} syncs" if profile.get("sync_count") else "",
                f"error: {profile.get('error')}" if profile.get("error") else "") if x),
            "kernels": [(_short(k.get("name"), 120), k.get("count"), _ms(k.get("total_us")),
                         _pct(k.get("share_of_kernel_time"))) for k in table.get("kernels") or []],
            "cpu_ops": [(_short(o.get("name"), 120), o.get("count"), _ms(o.get("self_us")),
                         _pct(o.get("share_of_window"))) for o in table.get("cpu_ops") or []],
            "call_sites": [(s.get("site"), _ms(s.get("gpu_us")) if s.get("gpu_us") else "",
                            _pct(s.get("gpu_share")) if s.get("gpu_us") else "",
                            f"{_ms(s.get('blocked_us'))} ({s.get('syncs')})" if s.get("blocked_us") else "",
                            _ms(s.get("cpu_us")) if s.get("cpu_us") else "") for s in table.get("call_sites") or []],
        })
    return views
