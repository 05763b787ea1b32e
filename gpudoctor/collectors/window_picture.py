"""The GPU's idle gaps by cause, and a few steps of the window reduced to what can be drawn.

The gaps are those of trace.py's statistics (the busiest device's idle time: kernel-to-kernel,
host wait, other, and after a sync), each given one cause, the first that holds:

- ``data``: not a kernel-to-kernel gap, and the host sat in a DataLoader ``__next__`` for at
  least half of it;
- ``sync``: not kernel-to-kernel, and it began while the host was blocked in a
  synchronisation (the gaps of ``idle_after_sync_us``);
- ``copies``: a host wait ended by a copy (the host was late issuing a copy);
- ``optimizer``: a host wait ended by work launched inside ``optimizer.step()``;
- ``launch``: a kernel-to-kernel gap, or any other host wait: the host issued work more
  slowly than the GPU ran it (Python, dispatch, launch calls);
- ``unexplained``: queued in time and still idle (a dependency), or no launch recorded.

So the causes split ``gpu_idle_us`` exactly. A finding's replay scenario names the cause
whose gaps it removes (SCENARIO_CAUSES): that is how a report links a finding to its gaps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from gpudoctor.base.idle_causes import IDLE_CAUSES
from gpudoctor.collectors.intervals import blocks, sequential_sum
from gpudoctor.collectors.kineto_names import DATA_ANNOTATION, OPTIMIZER_ANNOTATION, STEP_PREFIX
from gpudoctor.collectors.trace_columns import HostEvents, TraceColumns, str_codes
from gpudoctor.collectors.trace_decode import ANNOTATION, GPU_COPY, TraceIndex
from gpudoctor.session import PictureRow, WindowPicture

DATA, SYNC, COPIES, OPTIMIZER, LAUNCH, UNEXPLAINED = range(len(IDLE_CAUSES))
KERNEL_TO_KERNEL, HOST_WAIT, OTHER = 1, 2, 3  # trace._busy_and_gaps' kinds

BINS = 1500  # the picture's resolution: spans closer than span / BINS merge
MAX_GAPS = 1500  # gaps drawn one by one, longest first; the rest are summed per bin
GPU_ROWS = 4  # streams drawn one by one; the rest share a row
HOST_THREADS = 3  # threads drawn: the one that steps, then those that launched the most


class Gaps(NamedTuple):
    """The idle gaps of the busiest device, in time order."""

    starts: np.ndarray
    ends: np.ndarray
    kind: np.ndarray  # KERNEL_TO_KERNEL | HOST_WAIT | OTHER
    launch: np.ndarray  # position in index.api of the call that queued the work ending the gap; -1: none
    next_op: np.ndarray  # position in index.gpu of that work
    device_ops: np.ndarray  # positions in index.gpu of the device's work


def _covered(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Time covered by the sorted disjoint spans (starts, ends) before each time in `at`."""
    if not len(starts):
        return np.zeros(len(at))
    before = np.concatenate(([0.0], np.cumsum(ends - starts)))
    i = np.searchsorted(starts, at, side="right") - 1
    inside = np.where(i >= 0, np.minimum(at, ends[np.maximum(i, 0)]) - starts[np.maximum(i, 0)], 0.0)
    return before[np.maximum(i, 0)] * (i >= 0) + np.maximum(inside, 0.0)


def _inside(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    if not len(starts):
        return np.zeros(len(at), dtype=bool)
    i = np.searchsorted(starts, at, side="right") - 1
    return (i >= 0) & (at <= ends[np.maximum(i, 0)])


def _union(starts: np.ndarray, ends: np.ndarray, tolerance: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint spans covering the same time; spans closer than `tolerance` merge."""
    if not len(starts):
        return np.zeros(0), np.zeros(0)
    order = np.lexsort((ends, starts))
    starts, ends = starts[order], ends[order]
    if tolerance <= 0:
        merged_starts, merged_ends, _ = blocks(starts, ends)
        return merged_starts, merged_ends
    reach = np.maximum.accumulate(ends)
    opening = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1] + tolerance])
    closing = np.r_[opening[1:] - 1, len(starts) - 1]
    return starts[opening], reach[closing]


def ranges_named(columns: TraceColumns, test: Callable[[str], bool]) -> tuple[np.ndarray, np.ndarray]:
    """The union of the record_function ranges (any thread) whose name passes `test`."""
    ranges = HostEvents(columns.index.ops, ANNOTATION)
    chosen = ranges.named(test)
    return _union(ranges.start[chosen], ranges.end[chosen])


def gap_causes(columns: TraceColumns, gaps: Gaps, after_sync: np.ndarray) -> np.ndarray:
    """The cause (index in IDLE_CAUSES) of each gap."""
    count = len(gaps.starts)
    cause = np.full(count, UNEXPLAINED, dtype=np.int64)
    if not count:
        return cause
    host = gaps.kind == HOST_WAIT
    launched = gaps.launch >= 0
    cause[gaps.kind == KERNEL_TO_KERNEL] = LAUNCH
    cause[host & launched] = LAUNCH
    launch_at = np.where(launched, columns.api_start[np.maximum(gaps.launch, 0)], gaps.ends) \
        if len(columns.api_start) else gaps.ends
    optimizer = ranges_named(columns, lambda name: name.startswith(OPTIMIZER_ANNOTATION))
    cause[host & launched & _inside(*optimizer, launch_at)] = OPTIMIZER
    cause[host & (columns.gpu_kind[gaps.next_op] == GPU_COPY)] = COPIES
    longer = gaps.kind != KERNEL_TO_KERNEL
    cause[longer & after_sync] = SYNC
    data = ranges_named(columns, lambda name: DATA_ANNOTATION.match(name) is not None)
    waited = _covered(*data, gaps.ends) - _covered(*data, gaps.starts)
    cause[longer & (waited >= 0.5 * (gaps.ends - gaps.starts))] = DATA
    return cause


def idle_by_cause(gaps: Gaps, cause: np.ndarray) -> dict[str, float]:
    """Idle us per cause (those with any), summed in time order as the idle total is."""
    length = gaps.ends - gaps.starts
    return {name: round(sequential_sum(length[cause == code]), 3)
            for code, name in enumerate(IDLE_CAUSES) if (cause == code).any()}


def span_list(starts: np.ndarray, ends: np.ndarray, t0: float, t1: float,
              resolution: float) -> tuple[list[float], list[float]]:
    """The union of the spans within [t0, t1], from t0: (start, length pairs of its blocks of at
    least `resolution`; bin, busy us pairs of the shorter ones, summed per bin of that width)."""
    keep = (ends > t0) & (starts < t1)
    block_starts, block_ends = _union(np.maximum(starts[keep], t0), np.minimum(ends[keep], t1))
    lengths = block_ends - block_starts
    long = lengths >= resolution
    flat = np.empty(2 * int(long.sum()))
    flat[0::2] = np.round(block_starts[long] - t0, 1)
    flat[1::2] = np.round(lengths[long], 1)
    short = ~long
    bins: list[float] = []
    if short.any() and resolution > 0:
        where = np.minimum(((block_starts[short] - t0) / resolution).astype(np.int64), BINS - 1)
        sums = np.bincount(where, weights=lengths[short], minlength=BINS)
        used = np.flatnonzero(sums > 0)
        pairs = np.empty(2 * len(used))
        pairs[0::2], pairs[1::2] = used, np.round(sums[used], 2)
        bins = pairs.tolist()
    return flat.tolist(), bins


def step_boundaries(index: TraceIndex) -> tuple[str, list[float]]:
    """Where steps begin, by the best marks the trace holds: ``ProfilerStep#N`` starts, else
    the ends of ``optimizer.step()`` (a training step ends with it), else the starts of
    DataLoader ``__next__`` calls (an inference loop fetches its next batch)."""
    steps: dict[str, float] = {}
    optimizer: list[float] = []
    loader: list[float] = []
    ops = index.ops
    strings = index.strings.distinct
    marked = {code for code in set(ops.name.tolist())  # a few hundred distinct names: test those, not every event
              if strings[code].startswith((STEP_PREFIX, OPTIMIZER_ANNOTATION)) or DATA_ANNOTATION.match(strings[code])}
    rows = np.flatnonzero(np.isin(ops.name, list(marked))).tolist() if marked else []
    for row in rows:
        name: str = strings[ops.name[row]]
        ts = float(ops.ts[row])
        if name.startswith(STEP_PREFIX):
            steps[name] = min(ts, steps.get(name, ts))
        elif name.startswith(OPTIMIZER_ANNOTATION):
            optimizer.append(ts + float(ops.dur[row]))
        else:
            loader.append(ts)
    if steps:
        return "steps", list(steps.values())
    if optimizer:
        return "optimizer steps", optimizer
    return "batches", loader


PICTURE_STEPS = 3  # the steps a report draws: enough to see the pattern repeat, few enough to read


def picture_range(index: TraceIndex) -> tuple[float, float, list[float]]:
    """(start, end, the starts of the steps between them) of the last PICTURE_STEPS complete
    steps of a window before its last one, by the marks step_boundaries finds; the whole window, with no step start,
    when it marks fewer than two. The collectors draw this part, and the replay draws it again
    without each cause: both ask here, so both draw the same steps."""
    marks = sorted(set(step_boundaries(index)[1]))
    marks = [m for m in marks if index.first <= m <= index.last]
    if len(marks) < 2:
        return float(index.first), float(index.last), []
    # the window's last step is left out when others can stand in: it holds the window's closing
    # (the profiler stopping, gpudoctor's export), not the loop's own pattern
    chosen = marks[-PICTURE_STEPS - 2:-1] if len(marks) >= PICTURE_STEPS + 2 else marks[-PICTURE_STEPS - 1:]
    return chosen[0], chosen[-1], chosen[:-1]


def picture(columns: TraceColumns, gaps: Gaps, cause: np.ndarray, drawn: tuple[float, float, list[float]],
            name_sites: Callable[[list[int]], list[str | None]]) -> WindowPicture | None:
    """The drawn steps (picture_range) as rows of spans and gaps by cause.
    `name_sites(api_positions)` names the Python call site of each launch call (None: unknown)."""
    t0, t1, marks = drawn
    span = t1 - t0
    if span <= 0 or not len(gaps.device_ops):
        return None
    resolution = span / BINS
    out = WindowPicture(start_us=round(t0 - columns.index.first, 1), span_us=round(span, 1), steps=len(marks),
                        step_marks=[round(m - t0, 1) for m in marks], bin_us=round(resolution, 3))
    out.rows = _host_rows(columns, t0, t1, resolution) + _gpu_rows(columns, gaps.device_ops, t0, t1, resolution)
    starts, ends = np.maximum(gaps.starts, t0), np.minimum(gaps.ends, t1)
    inside = np.flatnonzero(ends > starts)
    lengths = ends[inside] - starts[inside]
    longest = np.argsort(-lengths, kind="stable")[:MAX_GAPS]
    drawn_gaps = np.sort(inside[longest[lengths[longest] >= resolution]])
    out.idle_by_cause_us = {name: round(sequential_sum(ends[inside][cause[inside] == code]
                                                       - starts[inside][cause[inside] == code]), 1)
                            for code, name in enumerate(IDLE_CAUSES) if (cause[inside] == code).any()}
    sites: dict[str, int] = {}
    launched = [int(gaps.launch[i]) for i in drawn_gaps.tolist() if gaps.launch[i] >= 0]
    named_by_call = dict(zip(launched, name_sites(launched)))
    for i in drawn_gaps.tolist():
        named = named_by_call.get(int(gaps.launch[i]))
        number = sites.setdefault(named, len(sites) + 1) if named else 0
        out.gaps.extend((round(float(starts[i] - t0), 1), round(float(ends[i] - starts[i]), 1), int(cause[i]), number))
    out.sites = list(sites)
    rest = np.setdiff1d(inside, drawn_gaps, assume_unique=True)
    if len(rest):
        bins = np.minimum(((starts[rest] - t0) / resolution).astype(np.int64), BINS - 1)
        for code, name in enumerate(IDLE_CAUSES):
            mine = cause[rest] == code
            if mine.any():
                sums = np.bincount(bins[mine], weights=(ends[rest] - starts[rest])[mine], minlength=BINS)
                out.idle_bins[name] = np.round(sums, 1).tolist()
    return out


def _host_rows(columns: TraceColumns, t0: float, t1: float, resolution: float) -> list[PictureRow]:
    """The threads that launched GPU work (the one with the loop's own ranges first), their
    DataLoader waits and their blocking calls."""
    api_codes, api_threads = columns.api_threads
    launches = np.array([k.launch for k in columns.api_kinds], dtype=bool)[columns.api_name_codes] \
        if len(columns.api_name_codes) else np.zeros(0, dtype=bool)
    counts = np.bincount(api_codes[launches], minlength=len(api_threads)) if launches.any() else \
        np.zeros(len(api_threads), dtype=np.int64)
    ranges = HostEvents(columns.index.ops, ANNOTATION)
    looped = {ranges.threads[int(code)] for code in set(ranges.thread_codes.tolist())} if len(ranges.start) else set()
    order = sorted((i for i in range(len(api_threads)) if counts[i] > 0),
                   key=lambda i: (api_threads[i] not in looped, -int(counts[i])))[:HOST_THREADS]
    operators = columns.operators
    rows = []
    for rank, code in enumerate(order):
        thread = api_threads[code]
        mine = operators.on(thread)
        names = {operators.distinct_names[c] for c in set(operators.name_codes[mine].tolist())} if len(mine) else set()
        name = "main thread" if rank == 0 else (
            "autograd thread" if any(n.startswith("autograd::engine") for n in names) else f"thread {thread[1]}")
        spans, bins = span_list(operators.start[mine], operators.end[mine], t0, t1, resolution)
        rows.append(PictureRow(name=name, kind="cpu", spans=spans, bins=bins))
    data = ranges_named(columns, lambda name: DATA_ANNOTATION.match(name) is not None)
    if len(data[0]):
        spans, bins = span_list(*data, t0, t1, resolution)
        rows.insert(1 if rows else 0, PictureRow(name="DataLoader wait", kind="data", spans=spans, bins=bins))
    syncs = np.array(columns.syncs, dtype=np.int64)
    if len(syncs):
        spans, bins = span_list(columns.api_start[syncs], columns.api_start[syncs] + columns.api_dur[syncs],
                                t0, t1, resolution)
        rows.append(PictureRow(name="host sync", kind="sync", spans=spans, bins=bins))
    return rows


def _gpu_rows(columns: TraceColumns, device_ops: np.ndarray, t0: float, t1: float,
              resolution: float) -> list[PictureRow]:
    values = columns.index.gpu.resolved("stream", "tid")
    stream_codes, streams = str_codes([values[i] for i in device_ops.tolist()])
    busy = np.bincount(stream_codes, weights=columns.gpu_dur[device_ops], minlength=len(streams))
    ranked = np.argsort(-busy, kind="stable").tolist()
    groups: list[tuple[str, list[int]]] = [(f"GPU stream {streams[c]}", [c]) for c in ranked[:GPU_ROWS]]
    if len(ranked) > GPU_ROWS:
        groups.append((f"GPU: {len(ranked) - GPU_ROWS} other streams", ranked[GPU_ROWS:]))
    rows = []
    for name, chosen in groups:
        own = device_ops[np.isin(stream_codes, chosen)]
        copies = own[columns.gpu_kind[own] == GPU_COPY]
        spans, bins = span_list(columns.gpu_start[own], columns.gpu_end[own], t0, t1, resolution)
        copy_spans, _ = span_list(columns.gpu_start[copies], columns.gpu_end[copies], t0, t1, 0.0)
        rows.append(PictureRow(name=name, kind="gpu", spans=spans, bins=bins, copies=copy_spans))
    return rows


def thread_of(columns: TraceColumns, api_position: int) -> Any:
    codes, threads = columns.api_threads
    return threads[int(codes[api_position])]
