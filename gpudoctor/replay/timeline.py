"""The dependency model of a profiled window, built from its Kineto (Chrome) trace.

Host side, per thread, in order: CPU items (time between CUDA calls, tagged
``data`` inside a DataLoader ``__next__``, ``dispatch`` inside an operator that
launched GPU work, ``python`` otherwise), LAUNCH items (a call that queued GPU
work, linked to it by correlation id), SYNC items (a call that blocks until GPU
work is done: stream, event or device synchronisation) and BLOCKING_COPY items
(a copy call that returned only after its own copy finished: pageable memory).

GPU side, per stream, in order: kernels, copies and memsets. An operation is
ready its own measured latency after its launch call began, starts once its
stream's previous operation has ended (plus the gap the GPU front end needed
between them) and, when it was measured waiting for work on another stream, once
that work has ended. Operations launched before the window (no launch call in
the trace) keep their measured start.

Which GPU work a blocking call waited for is read off the measurement: the last
GPU operation that ended while the call was blocked (calls that returned
without waiting keep their own duration). Nothing is assumed from API names
beyond which calls can block.
"""

from __future__ import annotations

import bisect
import math
import operator
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpudoctor.collectors.intervals import distinct
from gpudoctor.collectors.kineto_names import (  # noqa: F401  (DATA_ANNOTATION: replay.window reads it here)
    DATA_ANNOTATION,
    OPTIMIZER_ANNOTATION,
    SYNC_APIS,
    classify_gemm,
    copy_kind,
)
from gpudoctor.replay.items import (  # noqa: F401  (the model's names, imported from here)
    BLOCKING_COPY,
    CPU,
    DATA,
    DISPATCH,
    LAUNCH,
    PYTHON,
    SLACK_US,
    SYNC,
    USER,
    GpuOp,
    HostColumns,
    HostItem,
)
from gpudoctor.replay.merge import fold_helpers
from gpudoctor.replay.threads import (  # noqa: F401
    AGENT_WINDOW_FRAME,
    HostThread,
    host_threads,
    thread_items,
)

QUEUED_GAP_MAX_US = 30.0  # HTA: a shorter gap after the previous operation is the GPU's own front end
DEVICE_WIDE = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize",
                         "cudaFree", "cudaFreeHost"})


@dataclass
class Timeline:
    host: HostColumns  # every simulated thread's items, in measured order
    ops: list[GpuOp]  # in measured start order
    main_thread: int  # the thread whose end closes the window (most launches)
    start: float  # the window's first host item or GPU operation, us
    end: float  # measured end of the main thread or the last GPU operation, us
    launch_latency_us: float  # median launch-to-start latency of operations not held by their stream
    queued_gap_us: float  # median gap between back-to-back queued operations
    threads: int = 1
    stacks: bool = False  # Python frames were traced (with_stack): framework and user Python told apart
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # what replays of it share

    @property
    def measured_span_us(self) -> float:
        return self.end - self.start

    @property
    def items(self) -> list[HostItem]:
        """The host items as objects (made once, on demand: the replay reads the columns)."""
        made = self.cache.get("items")
        if not isinstance(made, list):
            made = self.cache["items"] = self.host.items()
        return made


def build(source: Any) -> Timeline | None:
    """The model of one trace's events (a TraceIndex, or what trace_decode.index_events
    takes), or None when they hold no host thread to replay."""
    from gpudoctor.collectors.trace_decode import index_events

    trace_index = index_events(source)
    ops, corr_ops = _gpu_ops(trace_index)
    active = [thread for thread in host_threads(trace_index) if thread.active]
    if not active:
        return None
    per_thread: list[HostColumns] = []
    launches: list[int] = []
    for number, thread in enumerate(active):
        thread_own, launched = thread_items(number, thread, corr_ops, ops)
        per_thread.append(thread_own)
        launches.append(launched)
    main = _main_thread(active, launches)
    fold_helpers(per_thread, launches, main)
    host = _in_measured_order(per_thread)
    for index, queued in enumerate(host.ops):
        for j in queued:
            ops[j].launch = index
    _link_blocking(host, ops)
    latency, gap = _gpu_order(host, ops)
    mine = [i for i, thread in enumerate(host.thread) if thread == main]
    first, last = (mine[0], mine[-1]) if mine else (0, len(host) - 1)
    start = min([host.ts[first]] + [op.start for op in ops[:1]])
    end = max([host.ts[last] + host.dur[last]] + [op.start + op.dur for op in ops])
    return Timeline(host=host, ops=ops, main_thread=main, start=start, end=end,
                    launch_latency_us=latency, queued_gap_us=gap, threads=len(active),
                    stacks=any(thread.stacks for thread in active))


def _gpu_ops(trace_index: Any) -> tuple[list[GpuOp], dict[Any, list[int]]]:
    """The GPU operations in (start, end) order; the operations of each correlation id."""
    from gpudoctor.collectors.trace_decode import GPU_KINDS, id_list

    gpu = trace_index.gpu
    count = len(gpu)
    order = np.lexsort((gpu.ts + gpu.dur, gpu.ts)).tolist()  # stable: file order on ties
    names = trace_index.strings.distinct
    codes = gpu.name.tolist()
    streams = list(zip(gpu.resolved("device", "pid"), gpu.resolved("stream", "tid")))
    kinds = list(map(GPU_KINDS.__getitem__, gpu.kind.tolist()))
    pick = operator.itemgetter(*order) if count > 1 else lambda values: tuple(values[i] for i in order)
    ops = list(map(GpuOp, pick(streams), pick(kinds), pick(gpu.ts.tolist()), pick(gpu.dur.tolist()),
                   pick(list(map(names.__getitem__, codes)))))
    gemms: dict[int, str | None] = {}
    nbytes = id_list(gpu.bytes)
    for new, old in enumerate(order):
        kind = kinds[old]
        if kind == "c":
            op = ops[new]
            op.nbytes = _number(nbytes[old]) or 0.0
            op.copy = copy_kind(op.name)
        elif kind == "k":
            code = codes[old]
            if code not in gemms:
                gemms[code] = classify_gemm(names[code])
            ops[new].gemm = gemms[code]
    rank = [0] * count
    for new, old in enumerate(order):
        rank[old] = new
    by_correlation: dict[Any, list[int]] = defaultdict(list)
    for old, correlation in enumerate(id_list(gpu.correlation)):
        if correlation is not None:
            by_correlation[correlation].append(rank[old])
    corr_ops = {c: idx if len(idx) == 1 else sorted(idx) for c, idx in by_correlation.items()}
    return ops, corr_ops


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _main_thread(active: list[HostThread], launches: list[int]) -> int:
    """The stepping thread: the one running Python (traced frames) and the loop's own ranges
    (DataLoader waits, optimizer steps); the autograd worker often launches more kernels."""
    return max(range(len(active)), key=lambda n: (active[n].stacks, active[n].annotations, launches[n], -n))


def _in_measured_order(per_thread: list[HostColumns]) -> HostColumns:
    """Every thread's items by (start, thread), the threads' own orders kept on ties."""
    host = per_thread[0]
    for other in per_thread[1:]:
        host.extend(other)
    starts = np.array(host.ts, dtype=np.float64)
    if len(per_thread) == 1 and (not len(starts) or bool((starts[1:] >= starts[:-1]).all())):
        return host
    order = np.lexsort((np.array(host.thread, dtype=np.int64), starts))
    return host.take(order.tolist())


def _link_blocking(host: HostColumns, ops: list[GpuOp]) -> None:
    """Mark copy calls that waited for their own copy, and what each sync waited for."""
    kinds = np.array(host.kind, dtype=np.int64)
    te = np.array(host.ts, dtype=np.float64) + np.array(host.dur, dtype=np.float64)
    op_end = np.array([op.start + op.dur for op in ops], dtype=np.float64)
    launches = np.flatnonzero(kinds == LAUNCH)
    _blocking_copies(host, ops, launches, te, op_end)
    syncs = np.flatnonzero(kinds == SYNC)
    if not len(syncs):
        return
    # the last GPU operation to end while the call was blocked is what it waited for
    by_end = np.lexsort((np.arange(len(ops)), op_end))
    end_times = op_end[by_end]
    j = np.searchsorted(end_times, te[syncs] + SLACK_US, side="right") - 1
    waited = (j >= 0) & (end_times[np.maximum(j, 0)] > np.array(host.ts, dtype=np.float64)[syncs]) \
        if len(ops) else np.zeros(len(syncs), dtype=bool)
    last_launch = _last_launch_before(host, launches, syncs)
    for index, did_wait, row, launch in zip(syncs.tolist(), waited.tolist(), j.tolist(), last_launch):
        device_wide = host.api[index] in DEVICE_WIDE
        if did_wait:
            op = int(by_end[row])
            host.waited[index], host.post[index] = True, max(0.0, float(te[index] - op_end[op]))
            host.scope[index] = None if device_wide else ops[op].stream
        else:  # the stream this thread queued work on last
            host.scope[index] = None if device_wide or launch < 0 else ops[host.ops[launch][-1]].stream


def _blocking_copies(host: HostColumns, ops: list[GpuOp], launches: np.ndarray, te: np.ndarray,
                     op_end: np.ndarray) -> None:
    """A copy from or to pageable memory, or a synchronous copy call, returns only once the copy
    is done (CUDA's rules): its launch call became a blocking copy. A memset or pinned copy that
    merely finished during its own launch call on an idle GPU did not block anything."""
    sizes = [len(host.ops[i]) for i in launches.tolist()]
    item_of = np.repeat(launches, sizes)
    op_of = np.array([j for i in launches.tolist() for j in host.ops[i]], dtype=np.int64)
    if not len(op_of):
        return
    copy_op = np.array([op.kind == "c" for op in ops], dtype=bool)
    pageable = np.array([(op.copy or "").endswith("_pageable") for op in ops], dtype=bool)
    synchronous = np.array([host.api[i] in SYNC_APIS for i in item_of.tolist()], dtype=bool)
    waits = copy_op[op_of] & (pageable[op_of] | synchronous)
    done = np.full(len(host), -np.inf)
    np.maximum.at(done, item_of[waits], op_end[op_of[waits]])
    for index in np.flatnonzero(np.isfinite(done) & (done <= te + SLACK_US)).tolist():
        host.kind[index], host.waited[index] = BLOCKING_COPY, True
        host.post[index] = max(0.0, float(te[index] - done[index]))


def _last_launch_before(host: HostColumns, launches: np.ndarray, syncs: np.ndarray) -> list[int]:
    """For each sync, the last launch call with operations on its thread before it (-1: none)."""
    thread = np.array(host.thread, dtype=np.int64)
    queued = launches[np.array([bool(host.ops[i]) for i in launches.tolist()], dtype=bool)] \
        if len(launches) else launches
    found = np.full(len(syncs), -1, dtype=np.int64)
    for number in distinct(thread[syncs]).tolist():
        mine = queued[thread[queued] == number]
        asked = np.flatnonzero(thread[syncs] == number)
        before = np.searchsorted(mine, syncs[asked], side="left") - 1
        found[asked] = np.where(before >= 0, mine[np.maximum(before, 0)], -1) if len(mine) else -1
    listed: list[int] = found.tolist()
    return listed


def _gpu_order(host: HostColumns, ops: list[GpuOp]) -> tuple[float, float]:
    """Each operation's launch latency, gap and cross-stream dependency; the medians."""
    by_stream: dict[Any, list[int]] = defaultdict(list)
    for i, op in enumerate(ops):
        by_stream[op.stream].append(i)
    ends = sorted((op.start + op.dur, i) for i, op in enumerate(ops))
    end_times = [e for e, _ in ends]
    latencies, gaps = [], []
    pending: list[int] = []
    item_ts = host.ts
    for indexes in by_stream.values():
        prev_end = None
        for i in indexes:
            op = ops[i]
            launch = item_ts[op.launch] if op.launch >= 0 else None
            held = prev_end is not None and (launch is None or launch < prev_end) \
                and op.start - prev_end <= QUEUED_GAP_MAX_US
            if held and prev_end is not None:
                op.gap = max(0.0, op.start - prev_end)
                gaps.append(op.gap)
                pending.append(i)  # latency filled in with the median below
            elif launch is not None:
                op.ready_offset = max(0.0, op.start - launch)
                latencies.append(op.ready_offset)
            prev_end = op.start + op.dur if prev_end is None else max(prev_end, op.start + op.dur)
    latency = statistics.median(latencies) if latencies else 5.0
    gap = statistics.median(gaps) if gaps else 1.0
    for i in pending:
        ops[i].ready_offset = latency
    cap = 3 * latency + 20.0
    for op in ops:
        if op.launch < 0 or op.ready_offset <= cap:
            continue
        # started far later than its launch: look for work on another stream that ended just before
        j = bisect.bisect_right(end_times, op.start + SLACK_US) - 1
        while j >= 0 and end_times[j] >= op.start - SLACK_US:
            other = ends[j][1]
            if ops[other].stream != op.stream:
                op.dep, op.ready_offset = other, latency
                break
            j -= 1
    return latency, gap
