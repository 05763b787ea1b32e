"""Per-step data wait read from a torch.profiler trace: what `analyze` knows of the input pipeline.

torch.profiler wraps every DataLoader batch in a range named
``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` (or
``_MultiProcessingDataLoaderIter``): the time the loop was blocked on its loader. Steps
are the trace's ``ProfilerStep#N`` ranges (``prof.step()``); a trace without them (a
window opened with ``prof.start()``/``stop()``, gpudoctor's own windows) gets one step per
batch, from one ``__next__`` start to the next. A step's data wait is the time its
``__next__`` ranges cover.

What a trace cannot know is left unknown, never guessed: how many workers a
multiprocessing iterator has (at least one) and what producing a batch cost inside them
(their processes are not in the trace). With the single-process iterator the batch is
produced inside ``__next__`` itself, so its wall time is the per-batch cost; the
operators recorded inside it bound its CPU time from below (Python work between them is
not recorded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudoctor.collectors.kineto_names import DATA_ANNOTATION, STEP_PREFIX
from gpudoctor.collectors.trace_decode import TraceIndex

SINGLE_PROCESS = "_SingleProcessDataLoaderIter"
MIN_STEPS = 3  # metrics.step_summary needs 3 steady steps


@dataclass(frozen=True)
class TraceLoaderSteps:
    """The loop's steps in a trace and its time blocked on the DataLoader in each."""

    source: str  # "profiler steps" (ProfilerStep#N ranges) | "batches" (from one __next__ to the next)
    durations_s: list[float]
    waits_s: list[float]
    batches: int  # __next__ ranges in the trace
    wait_max_s: float
    single_process: bool  # every batch came from a _SingleProcessDataLoaderIter (num_workers=0)
    batch_wall_s: float  # the __next__ ranges' total wall time
    batch_ops_s: float  # single process: the time operators inside them cover (a lower bound on their CPU time)


def loader_steps(index: TraceIndex) -> TraceLoaderSteps | None:
    """The steps and their data wait, or None when the trace holds no DataLoader batches
    (or too few steps to tell a steady state)."""
    ops = index.ops
    strings = index.strings.distinct
    names = set(ops.name.tolist())
    data_codes = [c for c in names if DATA_ANNOTATION.match(str(strings[c]))]
    if not data_codes:
        return None
    step_codes = [c for c in names if str(strings[c]).startswith(STEP_PREFIX)]
    rows = np.flatnonzero(np.isin(ops.name, data_codes))
    order = np.argsort(ops.ts[rows], kind="stable")
    rows = rows[order]
    starts = ops.ts[rows].astype(float)
    ends = starts + ops.dur[rows].astype(float)
    single = all(SINGLE_PROCESS in str(strings[c]) for c in data_codes)
    if step_codes:
        source, bounds = "profiler steps", _step_ranges(index, step_codes)
    else:
        source, bounds = "batches", list(zip(starts[:-1].tolist(), starts[1:].tolist()))
    if len(bounds) < MIN_STEPS:
        return None
    durations = [(end - start) / 1e6 for start, end in bounds]
    waits = [_covered(starts, ends, start, end) / 1e6 for start, end in bounds]
    return TraceLoaderSteps(source=source, durations_s=durations, waits_s=waits, batches=len(rows),
                            wait_max_s=float((ends - starts).max()) / 1e6, single_process=single,
                            batch_wall_s=float((ends - starts).sum()) / 1e6,
                            batch_ops_s=_ops_inside(index, rows, starts, ends) / 1e6 if single else 0.0)


def _step_ranges(index: TraceIndex, step_codes: list[int]) -> list[tuple[float, float]]:
    """Each ProfilerStep#N's (start, end) in us, in time order (one range per N)."""
    ops = index.ops
    rows = np.flatnonzero(np.isin(ops.name, step_codes))
    ranges: dict[int, tuple[float, float]] = {}
    for row in rows.tolist():
        code, start = int(ops.name[row]), float(ops.ts[row])
        end = start + float(ops.dur[row])
        low, high = ranges.get(code, (start, end))
        ranges[code] = (min(low, start), max(high, end))
    return sorted(ranges.values())


def _covered(starts: np.ndarray, ends: np.ndarray, low: float, high: float) -> float:
    """How much of [low, high) the (sorted, non-overlapping) __next__ ranges cover, in us."""
    return float(np.clip(np.minimum(ends, high) - np.maximum(starts, low), 0.0, None).sum())


def _ops_inside(index: TraceIndex, data_rows: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> float:
    """The time the operators inside the __next__ ranges (on their thread) cover, in us."""
    ops = index.ops
    op_starts = ops.ts.astype(float)
    op_ends = op_starts + ops.dur.astype(float)
    by_start = np.argsort(op_starts, kind="stable")
    sorted_starts = op_starts[by_start]
    total = 0.0
    for row, start, end in zip(data_rows.tolist(), starts.tolist(), ends.tolist()):
        window = by_start[np.searchsorted(sorted_starts, start, "left"):np.searchsorted(sorted_starts, end, "right")]
        inside = window[(op_ends[window] <= end) & (ops.tid[window] == ops.tid[row])
                        & (ops.pid[window] == ops.pid[row]) & (window != row)]
        if inside.size == 0:
            continue
        s, e = op_starts[inside], op_ends[inside]  # in start order
        reached = np.maximum.accumulate(np.concatenate(([start], e[:-1])))  # covered up to, before each
        total += float(np.clip(e - np.maximum(s, reached), 0.0, None).sum())
    return total
