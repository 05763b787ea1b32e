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
_GPU = frozenset({"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset"})
_API = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
_OPS = frozenset({"cpu_op", "operator"})

Thread = tuple[Any, Any]


def add_hotspots(events: list, out: ProfileSummary) -> None:
    """Fill `out.top_cpu_ops` and `out.call_sites` from the trace's events."""
    from gpudoctor.collectors.trace import _self_times, _tally, _times, _top

    ops: dict[Thread, list[tuple[float, float, str]]] = defaultdict(list)
    frames: dict[Thread, list[tuple[float, float, str]]] = defaultdict(list)
    launches: dict[Any, tuple[Thread, float]] = {}  # correlation -> (thread, ts)
    syncs: list[tuple[Thread, float, float]] = []
    gpu_us: dict[Any, float] = defaultdict(float)
    autograd_threads: set[Thread] = set()
    for event in events:
        span = _times(event)
        name = event.get("name") if span is not None else None
        if span is None or not isinstance(name, str):
            continue
        category = str(event.get("cat", "")).lower()
        thread = (event.get("pid"), event.get("tid"))
        ts, end = span[0], span[0] + span[1]
        if category in _OPS:
            ops[thread].append((ts, end, name))
            if name.startswith("autograd::engine"):
                autograd_threads.add(thread)
        elif category == "python_function":
            frames[thread].append((ts, end, name))
        elif category in _GPU:
            args = event.get("args")
            if isinstance(args, dict) and args.get("correlation") is not None:
                gpu_us[args["correlation"]] += span[1]
        elif category in _API:
            api = _VERSION_SUFFIX.sub("", name)
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            if api in SYNC_APIS:
                syncs.append((thread, ts, span[1]))
            if args.get("correlation") is not None and (api in KERNEL_LAUNCH_APIS or api in GRAPH_LAUNCH_APIS
                                                        or "Memcpy" in api or "Memset" in api):
                launches[args["correlation"]] = (thread, ts)
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


def _innermost(names: list[str]) -> str:
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
        for thread, queries in self.queries.items():
            queries.sort(key=lambda q: q[0])
            stacks = _enclosing(self.frames.get(thread, []), [q[0] for q in queries])
            for (_, kind, value), stack in zip(queries, stacks):
                names = [i[2] for i in stack]
                if any(marker in n.replace("\\", "/") for n in names for marker in AGENT_WINDOW):
                    continue  # gpudoctor's own work (opening or closing the window)
                if names:
                    where = (_site(names) or _innermost(names)).split(" -> ", 1)[0]
                else:
                    where = AUTOGRAD if thread in self.autograd else NO_FRAME
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
