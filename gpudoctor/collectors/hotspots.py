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

from typing import Any

import numpy as np

from gpudoctor.collectors.intervals import first_appearance, grouped_sums
from gpudoctor.collectors.stacks import FrameStacks
from gpudoctor.collectors.trace_columns import TraceColumns
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


def add_hotspots(source: Any, out: ProfileSummary, columns: TraceColumns | None = None) -> None:
    """Fill `out.top_cpu_ops` and `out.call_sites` from the trace's events (a TraceIndex or
    what trace_decode.index_events takes); `columns`: the index's, when already taken."""
    from gpudoctor.collectors.trace import _top
    from gpudoctor.collectors.trace_decode import index_events

    if columns is None:
        columns = TraceColumns(index_events(source))
    out.top_cpu_ops = _top(columns.own_times)[:TOP_OPS]
    operators = columns.operators
    autograd = operators.thread_codes[operators.named(lambda name: name.startswith("autograd::engine"))]
    sites = _Sites(columns.frame_stacks, {operators.threads[code] for code in set(autograd.tolist())})
    caller = columns.gpu_caller
    if len(columns.launch_calls):
        mapped = caller >= 0
        counts = np.bincount(caller[mapped], minlength=len(columns.launch_calls))
        gpu_us = grouped_sums(caller[mapped], columns.gpu_dur[mapped], len(columns.launch_calls))
        queued = counts > 0  # launch calls whose work is in the trace, in the order of their ids
        if queued.any():
            positions = columns.launch_calls[queued]
            api_codes, api_threads = columns.api_threads
            sites.add(api_codes[positions], api_threads, columns.api_start[positions], "gpu", gpu_us[queued])
    if columns.syncs:
        positions = np.array(columns.syncs, dtype=np.int64)
        api_codes, api_threads = columns.api_threads
        sites.add(api_codes[positions], api_threads, columns.api_start[positions], "sync", columns.api_dur[positions])
    if len(operators.start):
        nest = operators.nested
        outer = np.flatnonzero(nest.outermost())
        thread_of = np.searchsorted(nest.bounds, outer, side="right") - 1
        sites.add(thread_of, operators.threads, nest.start[outer], "cpu", nest.end[outer] - nest.start[outer])
    out.call_sites = sites.ranked()


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
    """Queries (thread, time) collected first, resolved to call sites in one sweep: each
    query's innermost open frame (intervals.Nested.tops), whose stack names the site. Frames
    get the id of their stack (a trie of (parent's stack, name)), so a site is worked out
    once per distinct stack; a stack that still holds a frame ended before the query (not
    properly nested) is filtered the way the frame stack was."""

    KINDS = ("gpu", "sync", "cpu")

    def __init__(self, stacks: FrameStacks | None, autograd: set[Thread]) -> None:
        self.stacks = stacks
        self.autograd = autograd
        self.threads: dict[Thread, int] = {}  # in order of their first query
        self.parts: list[tuple[np.ndarray, np.ndarray, int, np.ndarray]] = []  # thread ids, times, kind, values

    def add(self, thread_codes: np.ndarray, threads: list[Thread], times: np.ndarray, kind: str,
            values: np.ndarray) -> None:
        """Queries on `threads[thread_codes[i]]` at `times[i]`, in this order."""
        if not len(thread_codes):
            return
        ids = np.zeros(len(threads), dtype=np.int64)
        for code in first_appearance(thread_codes).tolist():
            ids[code] = self.threads.setdefault(threads[code], len(self.threads))
        self.parts.append((ids[thread_codes], np.asarray(times, dtype=np.float64), self.KINDS.index(kind),
                           np.asarray(values, dtype=np.float64)))

    def ranked(self) -> list[CallSite]:
        if not self.parts:
            return []
        thread_ids = np.concatenate([p[0] for p in self.parts])
        times = np.concatenate([p[1] for p in self.parts])
        kinds = np.concatenate([np.full(len(p[0]), p[2]) for p in self.parts])
        values = np.concatenate([p[3] for p in self.parts])
        # stable: each thread's queries by time, in the order added
        by_time = np.argsort(times, kind="stable")
        order = by_time[np.argsort(thread_ids[by_time].astype(np.int16) if len(self.threads) < 2 ** 15
                                   else thread_ids[by_time], kind="stable")]
        thread_ids, times, kinds, values = thread_ids[order], times[order], kinds[order], values[order]
        site_codes, names = self._where(thread_ids, times)
        table: dict[str, CallSite] = {}
        for code in first_appearance(site_codes).tolist():  # the order the loop met them
            if names[code] is not None:
                table[names[code]] = CallSite(site=names[code])  # type: ignore[index, unused-ignore]
        for kind, (total_field, count_field) in enumerate((("gpu_us", "launches"), ("blocked_us", "syncs"),
                                                           ("cpu_us", ""))):
            mine = kinds == kind
            totals = grouped_sums(site_codes[mine], values[mine], len(names)).tolist()
            counts = np.bincount(site_codes[mine], minlength=len(names)).tolist()
            for code, name in enumerate(names):
                if name is not None and counts[code]:
                    setattr(table[name], total_field, totals[code])
                    if count_field:
                        setattr(table[name], count_field, counts[code])
        keep: dict[str, CallSite] = {}
        for field in ("gpu_us", "blocked_us", "cpu_us"):
            ranked = sorted((s for s in table.values() if getattr(s, field) > 0), key=lambda s: -getattr(s, field))
            for site in ranked[:TOP_SITES]:
                keep[site.site] = site
        for site in keep.values():
            site.gpu_us, site.blocked_us, site.cpu_us = (round(site.gpu_us, 3), round(site.blocked_us, 3),
                                                         round(site.cpu_us, 3))
        return sorted(keep.values(), key=lambda s: (-(s.gpu_us + s.blocked_us + s.cpu_us), s.site))

    def _where(self, thread_ids: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, list[str | None]]:
        """The site of each query, as codes into a list of sites (None: gpudoctor's own work)."""
        stacks = self.stacks
        places: dict[tuple[str, ...], int] = {}  # a stack's site, once
        site_codes: dict[str | None, int] = {}
        where = np.zeros(len(times), dtype=np.int64)
        threads = list(self.threads)
        bounds = np.searchsorted(thread_ids, np.arange(len(threads) + 1))
        for thread_id, thread in enumerate(threads):
            low, high = int(bounds[thread_id]), int(bounds[thread_id + 1])
            if low == high:
                continue
            empty = site_codes.setdefault(AUTOGRAD if thread in self.autograd else NO_FRAME, len(site_codes))
            if stacks is None:
                where[low:high] = empty
                continue
            stack_codes, found = stacks.at(thread, times[low:high])
            for names in found:
                if names and names not in places:
                    places[names] = site_codes.setdefault(_place(names), len(site_codes))
            site_of = np.array([places[names] if names else empty for names in found], dtype=np.int64)
            where[low:high] = site_of[stack_codes] if len(site_of) else empty
        return where, list(site_codes)


def _place(names: tuple[str, ...]) -> str | None:
    """The site of a (non-empty) stack, None for gpudoctor's own work."""
    from gpudoctor.collectors.trace import _site

    if any(marker in n.replace("\\", "/") for n in names for marker in AGENT_WINDOW):
        return None  # gpudoctor's own work (opening or closing the window)
    return (_site(names) or _innermost(names)).split(" -> ", 1)[0]
