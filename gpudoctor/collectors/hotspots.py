"""Hotspots of a profiler window: operators by their own CPU time, and the Python call
sites that launched the most GPU work, blocked the most, or spent the most CPU in
operators.

Operators' own (self) time is their duration less that of the operators nested in them
on the same thread (``record_function`` ranges such as ``ProfilerStep#N`` are not
operators). A call site is the innermost Python frame of the workload's own code
around the call (gpudoctor.collectors.trace's rule: neither torch, an installed
package nor the standard library), from the ``python_function`` events that
``with_stack=True`` records; torch records a function's ``def`` line for calls made
inside the window. GPU time goes to the site of the launch call its correlation id
names (the callee is left out: one row per place in the workload's code). Work
launched from a thread without Python frames is the autograd engine's
(backward) when that thread runs autograd functions, else "(no Python frame)".
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpudoctor.collectors.kineto_names import (
    _VERSION_SUFFIX,
    GRAPH_LAUNCH_APIS,
    KERNEL_LAUNCH_APIS,
    SYNC_APIS,
)
from gpudoctor.session import CallSite, ProfileSummary

TOP_OPS = 10
TOP_SITES = 5  # per ranking (GPU time, blocked time, CPU time); the union is kept
AGENT_FRAME = "gpudoctor/agent/"
# the agent's own work inside a window (opening or closing it); its wrappers around the
# DataLoader and the fetchers are transparent: the workload's work goes on inside them
AGENT_WINDOW = ("gpudoctor/agent/profiler.py",)
AUTOGRAD = "(autograd engine: backward)"
NO_FRAME = "(no Python frame)"
NOT_OWN = "(no frame of the workload's own code)"

Thread = tuple[Any, Any]


def add_hotspots(source: Any, out: ProfileSummary) -> None:
    """Fill `out.top_cpu_ops` and `out.call_sites` from the trace's events (a TraceIndex or
    what trace_decode.index_events takes)."""
    from gpudoctor.collectors.trace import _self_times, _tally, _top
    from gpudoctor.collectors.trace_decode import OP, index_events

    index = index_events(source)
    ops: dict[Thread, list[tuple[float, float, str]]] = defaultdict(list)
    frames: dict[Thread, list[tuple[float, float, str]]] = defaultdict(list)
    launches: dict[Any, tuple[Thread, float]] = {}  # correlation -> (thread, ts)
    syncs: list[tuple[Thread, float, float]] = []
    gpu_us: dict[Any, float] = defaultdict(float)
    autograd_threads: set[Thread] = set()
    for event in index.ops:
        if event.kind == OP:
            thread, name = (event.pid, event.tid), event.name
            ops[thread].append((event.ts, event.ts + event.dur, name))  # type: ignore[operator,arg-type]
            if name.startswith("autograd::engine"):  # type: ignore[union-attr]
                autograd_threads.add(thread)
    for event in index.frames:
        frames[(event.pid, event.tid)].append((event.ts, event.ts + event.dur, event.name))  # type: ignore[operator,arg-type]
    for event in index.gpu:
        if event.args is not None and event.args.correlation is not None:
            gpu_us[event.args.correlation] += event.dur  # type: ignore[operator]
    apis: dict[str, tuple[bool, bool]] = {}  # name -> sync?, launch?
    for event in index.api:
        known = apis.get(event.name)  # type: ignore[arg-type]
        if known is None:
            api = _VERSION_SUFFIX.sub("", event.name)  # type: ignore[arg-type]
            known = apis[event.name] = (api in SYNC_APIS, api in KERNEL_LAUNCH_APIS or api in GRAPH_LAUNCH_APIS  # type: ignore[index]
                                        or "Memcpy" in api or "Memset" in api)
        if known[0]:
            syncs.append(((event.pid, event.tid), event.ts, event.dur))  # type: ignore[arg-type]
        if known[1] and event.args is not None and event.args.correlation is not None:
            launches[event.args.correlation] = ((event.pid, event.tid), event.ts)  # type: ignore[assignment]
    own: dict[str, list[float]] = {}
    for intervals in ops.values():
        for op_name, seconds in _self_times(intervals):
            _tally(own, op_name, seconds)
    out.top_cpu_ops = _top(own.items())[:TOP_OPS]
    sites = _Sites(frames, autograd_threads)
    for correlation, (thread, ts) in launches.items():
        if correlation in gpu_us:
            sites.add(thread, ts, "gpu", gpu_us[correlation])
    for thread, ts, dur in syncs:
        sites.add(thread, ts, "sync", dur)
    for thread, intervals in ops.items():
        for ts, end in _outermost(intervals):
            sites.add(thread, ts, "cpu", end - ts)
    out.call_sites = sites.ranked()


def _outermost(intervals: list[tuple[float, float, str]]) -> list[tuple[float, float]]:
    """The operators not nested in another on the same thread."""
    result: list[tuple[float, float]] = []
    reach = float("-inf")
    for start, end, _ in sorted(intervals, key=lambda i: (i[0], -i[1])):
        if start >= reach:
            result.append((start, end))
            reach = end
        else:
            reach = max(reach, end)
    return result


def _innermost(names: list[str] | tuple[str, ...]) -> str:
    """Without a frame of the workload's own code: the innermost frame outside torch (a
    library's training loop), else NOT_OWN."""
    from gpudoctor.collectors.kineto_names import _FRAME_NAME

    for name in reversed(names):
        match = _FRAME_NAME.match(name)
        path = match["file"].replace("\\", "/") if match else ""
        if match and not path.startswith(("torch/", "<", AGENT_FRAME)) and "/torch/" not in path \
                and AGENT_FRAME not in path and "_gpudoctor_agent" not in path:
            for marker in ("site-packages/", "dist-packages/"):
                path = path.split(marker, 1)[-1]
            return f"{match['func']} ({path}:{match['line']})"
    return NOT_OWN


class _Sites:
    """Queries (thread, time) collected first, resolved to call sites in one sweep per thread."""

    def __init__(self, frames: dict[Thread, list[tuple[float, float, str]]], autograd: set[Thread]) -> None:
        self.frames = frames
        self.autograd = autograd
        self.queries: dict[Thread, list[tuple[float, str, float]]] = defaultdict(list)

    def add(self, thread: Thread, ts: float, kind: str, value: float) -> None:
        self.queries[thread].append((ts, kind, value))

    def ranked(self) -> list[CallSite]:
        from gpudoctor.collectors.trace import _enclosing, _site

        table: dict[str, CallSite] = {}
        places: dict[tuple[str, ...], str | None] = {}  # a stack's site (None: gpudoctor's own), once
        for thread, queries in self.queries.items():
            queries.sort(key=lambda q: q[0])
            stacks = _enclosing(self.frames.get(thread, []), [q[0] for q in queries])
            for (_, kind, value), stack in zip(queries, stacks):
                names = tuple(i[2] for i in stack)
                if names in places:
                    where = places[names]
                elif any(marker in n.replace("\\", "/") for n in names for marker in AGENT_WINDOW):
                    where = places[names] = None  # gpudoctor's own work (opening or closing the window)
                elif names:
                    where = places[names] = (_site(names) or _innermost(names)).split(" -> ", 1)[0]
                else:
                    where = AUTOGRAD if thread in self.autograd else NO_FRAME
                if where is None:
                    continue
                site = table.get(where)
                if site is None:
                    site = table[where] = CallSite(site=where)
                if kind == "gpu":
                    site.gpu_us += value
                    site.launches += 1
                elif kind == "sync":
                    site.blocked_us += value
                    site.syncs += 1
                else:
                    site.cpu_us += value
        keep: dict[str, CallSite] = {}
        for field in ("gpu_us", "blocked_us", "cpu_us"):
            ranked = sorted((s for s in table.values() if getattr(s, field) > 0), key=lambda s: -getattr(s, field))
            for site in ranked[:TOP_SITES]:
                keep[site.site] = site
        for site in keep.values():
            site.gpu_us, site.blocked_us, site.cpu_us = (round(site.gpu_us, 3), round(site.blocked_us, 3),
                                                         round(site.cpu_us, 3))
        return sorted(keep.values(), key=lambda s: (-(s.gpu_us + s.blocked_us + s.cpu_us), s.site))
