"""The workload's host synchronisations in a trace, each named and placed.

A synchronising CUDA call (trace_columns.TraceColumns.syncs) is named after the outermost
ATen operator around it (``aten::item`` for ``.item()``; the call's own name without one)
and placed at the Python frames around it (trace._site: the innermost frame of the
workload's own code). Calls made while gpudoctor closed its own window (its frames around
them) are not the workload's and are left out.

Each thread's calls are taken in (time, duration, name) order, the threads in the order of
their first call. The frames around a call are its thread's frame stack at that time
(stacks.FrameStacks: one lookup per distinct stack); the outermost operator around it is the
first, in (start, -end) order, of the thread's ATen operators still open at its time: a
search in the running maximum of their ends.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudoctor.collectors.intervals import first_appearance
from gpudoctor.collectors.trace_columns import TraceColumns

# gpudoctor opening or closing its own window: its syncs are not the workload's (its wrappers
# around the DataLoader, the fetchers and the safe points are transparent: the work inside is)
AGENT_WINDOW_FRAME = "gpudoctor/agent/profiler"


@dataclass
class Syncs:
    """The workload's synchronising calls, in the order they are counted."""

    start: np.ndarray  # us
    dur: list[float]  # us
    sites: dict[tuple[str, str | None], list[float]]  # (operator or call, site) -> [count, total us], as met


def workload_syncs(columns: TraceColumns, site: Any) -> Syncs:
    """`site(frames)`: the call site of a stack of frame names (trace._site)."""
    positions = np.array(columns.syncs, dtype=np.int64)
    durations: list[float] = []
    sites: dict[tuple[str, str | None], list[float]] = {}
    if not len(positions):
        return Syncs(np.zeros(0), durations, sites)
    api_codes, api_threads = columns.api_threads
    thread_codes = api_codes[positions]
    apis = [kind.api for kind in columns.api_kinds]
    names = [apis[code] for code in columns.api_name_codes[positions].tolist()]
    ranks = {api: rank for rank, api in enumerate(sorted(set(names)))}
    thread_rank = np.zeros(len(api_threads), dtype=np.int64)
    thread_rank[first_appearance(thread_codes)] = np.arange(len(set(thread_codes.tolist())))
    ts, dur = columns.api_start[positions], columns.api_dur[positions]
    order = np.lexsort((np.array([ranks[name] for name in names], dtype=np.int64), dur, ts,
                        thread_rank[thread_codes]))
    bounds = np.flatnonzero(np.diff(thread_codes[order], prepend=-1, append=-1))
    kept: list[np.ndarray] = []
    for low, high in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        mine = order[low:high]
        thread = api_threads[int(thread_codes[mine[0]])]
        at = ts[mine]
        places, agent = _frames_around(columns, thread, at, site)
        labels = _outermost_aten(columns, thread, at)
        for row, label, took, place, own in zip(mine.tolist(), labels, dur[mine].tolist(), places, agent):
            if own:
                continue  # gpudoctor's own (closing the profiler window), not the workload's
            stat = sites.setdefault((label or names[row], place), [0, 0.0])
            stat[0] += 1
            stat[1] += took
            durations.append(took)
        kept.append(at[~np.array(agent, dtype=bool)])
    return Syncs(np.concatenate(kept), durations, sites)


def _frames_around(columns: TraceColumns, thread: Any, at: np.ndarray,
                   site: Any) -> tuple[list[str | None], list[bool]]:
    """Per time: the site of the frames around it, and whether gpudoctor's own frames are among them."""
    stacks = columns.frame_stacks
    if stacks is None:
        return [site(())] * len(at), [False] * len(at)
    codes, found = stacks.at(thread, at)
    places = [site(names) for names in found]
    own = [any(map(_agent_window_frame, names)) for names in found]
    picks = codes.tolist()
    return [places[code] for code in picks], [own[code] for code in picks]


def _outermost_aten(columns: TraceColumns, thread: Any, at: np.ndarray) -> list[str | None]:
    """Per time: the name of the first (by start, then longest) ATen operator open at it, or None."""
    operators = columns.operators
    none: list[str | None] = [None] * len(at)
    try:
        code = operators.threads.index(thread)
    except ValueError:
        return none
    if not len(operators.start):
        return none
    nest = operators.nested
    low, high = int(nest.bounds[code]), int(nest.bounds[code + 1])
    aten = np.array([name.startswith("aten::") for name in operators.distinct_names], dtype=bool)
    rows = low + np.flatnonzero(aten[operators.name_codes[nest.order[low:high]]])
    if not len(rows):
        return none
    starts, reach = nest.start[rows], np.maximum.accumulate(nest.end[rows])
    opened = np.searchsorted(starts, at, side="right")  # those starting at or before the time
    first = np.searchsorted(reach, at, side="left")  # the first one ending at or after it
    found = first < opened
    name_codes = operators.name_codes[nest.order[rows[np.minimum(first, len(rows) - 1)]]].tolist()
    return [operators.distinct_names[c] if ok else None for c, ok in zip(name_codes, found.tolist())]


@functools.lru_cache(maxsize=1 << 14)  # the same frames around every sync of a step
def _agent_window_frame(frame: str) -> bool:
    return AGENT_WINDOW_FRAME in frame.replace("\\", "/")
