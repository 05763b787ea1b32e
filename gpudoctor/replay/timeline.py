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
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpudoctor.collectors.kineto_names import (  # noqa: F401  (DATA_ANNOTATION: replay.window reads it here)
    DATA_ANNOTATION,
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
    SYNC,
    USER,
    GpuOp,
    HostItem,
)
from gpudoctor.replay.threads import (  # noqa: F401
    AGENT_WINDOW_FRAME,
    OPTIMIZER_ANNOTATION,
    HostThread,
    host_threads,
    thread_items,
)

SLACK_US = 3.0  # host and GPU clocks agree to a few microseconds
QUEUED_GAP_MAX_US = 30.0  # HTA: a shorter gap after the previous operation is the GPU's own front end
DEVICE_WIDE = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize",
                         "cudaFree", "cudaFreeHost"})
HELPER_IDLE_US = 50.0  # a helper thread's time outside any operator longer than this is idle, not work


@dataclass
class Timeline:
    items: list[HostItem]  # every simulated thread, in measured order
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


def build(source: Any) -> Timeline | None:
    """The model of one trace's events (a TraceIndex, or what trace_decode.index_events
    takes), or None when they hold no host thread to replay."""
    from gpudoctor.collectors.trace_decode import index_events

    trace_index = index_events(source)
    ops, corr_ops = _gpu_ops(trace_index)
    active = [thread for thread in host_threads(trace_index) if thread.active]
    if not active:
        return None
    per_thread: list[list[HostItem]] = []
    launches: list[int] = []
    for number, thread in enumerate(active):
        thread_own, launched = thread_items(number, thread, corr_ops, ops)
        per_thread.append(thread_own)
        launches.append(launched)
    main = _main_thread(active, launches)
    for number, launched in enumerate(launches):
        if number != main and launched:
            per_thread[number] = _merge_helper(per_thread[main], per_thread[number], main)
    items = _in_measured_order(per_thread)
    for index, item in enumerate(items):
        for queued in item.ops:
            ops[queued].launch = index
    _link_blocking(items, ops)
    latency, gap = _gpu_order(items, ops)
    main_items = [it for it in items if it.thread == main] or items
    start = min([main_items[0].ts] + [op.start for op in ops[:1]])
    end = max([main_items[-1].ts + main_items[-1].dur] + [op.start + op.dur for op in ops])
    return Timeline(items=items, ops=ops, main_thread=main, start=start, end=end,
                    launch_latency_us=latency, queued_gap_us=gap, threads=len(active),
                    stacks=any(thread.stacks for thread in active))


def _gpu_ops(trace_index: Any) -> tuple[list[GpuOp], dict[Any, list[int]]]:
    """The GPU operations in (start, end) order; the operations of each correlation id."""
    from gpudoctor.collectors.trace_decode import GPU_KINDS

    gpu = trace_index.gpu
    names = trace_index.strings.distinct
    gemms: dict[int, str | None] = {}
    ops: list[GpuOp] = []
    by_correlation: dict[Any, list[int]] = defaultdict(list)
    for kind_code, start, dur, code, device, stream, nbytes, correlation in zip(
            gpu.kind.tolist(), gpu.ts.tolist(), gpu.dur.tolist(), gpu.name.tolist(), gpu.resolved("device", "pid"),
            gpu.resolved("stream", "tid"), gpu.bytes, gpu.correlation):
        kind = GPU_KINDS[kind_code]
        op = GpuOp(stream=(device, stream), kind=kind, start=start, dur=dur, name=names[code])
        if kind == "c":
            op.nbytes = _number(nbytes) or 0.0
            op.copy = copy_kind(op.name)
        elif kind == "k":
            if code not in gemms:
                gemms[code] = classify_gemm(op.name)
            op.gemm = gemms[code]
        if correlation is not None:
            by_correlation[correlation].append(len(ops))
        ops.append(op)
    starts = np.array([op.start for op in ops], dtype=np.float64)
    ends = starts + np.array([op.dur for op in ops], dtype=np.float64)
    order = np.lexsort((ends, starts)).tolist()  # stable: file order on ties
    remap = {old: new for new, old in enumerate(order)}
    corr_ops = {c: [remap[idx[0]]] if len(idx) == 1 else sorted(remap[i] for i in idx)
                for c, idx in by_correlation.items()}
    return [ops[i] for i in order], corr_ops


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _main_thread(active: list[HostThread], launches: list[int]) -> int:
    """The stepping thread: the one running Python (traced frames) and the loop's own ranges
    (DataLoader waits, optimizer steps); the autograd worker often launches more kernels."""
    return max(range(len(active)), key=lambda n: (active[n].stacks, active[n].annotations, launches[n], -n))


def _in_measured_order(per_thread: list[list[HostItem]]) -> list[HostItem]:
    """Every thread's items by (start, thread), the threads' own orders kept on ties."""
    items = [item for thread_own in per_thread for item in thread_own]
    if len(per_thread) == 1:
        starts = np.array([item.ts for item in items], dtype=np.float64)
        if not len(starts) or bool((starts[1:] >= starts[:-1]).all()):
            return items
    order = np.lexsort((np.array([item.thread for item in items], dtype=np.int64),
                        np.array([item.ts for item in items], dtype=np.float64)))
    return [items[i] for i in order.tolist()]


def _merge_helper(main_items: list[HostItem], helper: list[HostItem], main: int) -> list[HostItem]:
    """Fold a helper thread's bursts into the main thread where the main thread waited for them.

    PyTorch runs CUDA backward passes on an autograd worker thread while the thread that
    called ``backward()`` blocks. That is one thread of control: the worker's burst of
    operators and launches stands in for the caller's wait, and the worker's long idle
    stretches between bursts are not work. A burst during which the main thread itself
    launched or blocked on the GPU is real concurrency and stays on its own thread.
    Returns what is left of the helper (its concurrent bursts); `main_items` is edited.
    """
    bursts: list[list[HostItem]] = [[]]
    for item in helper:
        idle = item.kind == CPU and item.tag == PYTHON and not item.api and item.dur >= HELPER_IDLE_US
        if idle:
            if bursts[-1]:
                bursts.append([])
        else:
            bursts[-1].append(item)
    kept: list[HostItem] = []
    main_items.sort(key=lambda it: it.ts)
    starts = [it.ts for it in main_items]  # one thread's items follow each other: no two overlap
    cuts: dict[int, list[tuple[float, float]]] = defaultdict(list)  # main item -> burst spans inside it
    added: list[HostItem] = []
    for burst in (b for b in bursts if b):
        start, end = burst[0].ts, burst[-1].ts + burst[-1].dur
        lo = max(0, bisect.bisect_right(starts, start) - 1)
        hi = bisect.bisect_left(starts, end)
        overlapping = [k for k in range(lo, hi) if main_items[k].ts + main_items[k].dur > start]
        # the main thread's own work within the burst (beyond the clocks' few us of disagreement)
        busy = [k for k in overlapping if (main_items[k].kind != CPU or main_items[k].tag == DISPATCH)
                and min(end, main_items[k].ts + main_items[k].dur) - max(start, main_items[k].ts) > SLACK_US]
        if busy:
            kept.extend(burst)  # the main thread was busy meanwhile: truly concurrent
            continue
        for k in overlapping:  # the main thread waited: cut its wait out
            cuts[k].append((start, end))
        for it in burst:
            it.thread = main
            added.append(it)
    for k, spans in cuts.items():
        it, at = main_items[k], main_items[k].ts
        for start, end in [*sorted(spans), (it.ts + it.dur, it.ts + it.dur)]:
            if start > at:
                added.append(HostItem(CPU, main, at, start - at, tag=it.tag))
            at = max(at, end)
    if cuts or added:
        main_items[:] = sorted([it for k, it in enumerate(main_items) if k not in cuts] + added,
                               key=lambda it: it.ts)
    return kept


def _link_blocking(items: list[HostItem], ops: list[GpuOp]) -> None:
    """Mark copy calls that waited for their own copy, and what each sync waited for."""
    ends = sorted((op.start + op.dur, i) for i, op in enumerate(ops))
    end_times = [e for e, _ in ends]
    last_stream: dict[int, Any] = {}
    for item in items:
        te = item.ts + item.dur
        if item.kind == LAUNCH:
            # a copy from or to pageable memory, or a synchronous copy call, returns only once the
            # copy is done (CUDA's rules); a memset or pinned copy that merely finished during its
            # own launch call on an idle GPU did not block anything
            copies = [ops[i] for i in item.ops if ops[i].kind == "c" and (
                (ops[i].copy or "").endswith("_pageable") or item.api in SYNC_APIS)]
            done = max((op.start + op.dur for op in copies), default=None)
            if done is not None and done <= te + SLACK_US:
                item.kind, item.waited, item.post = BLOCKING_COPY, True, max(0.0, te - done)
            if item.ops:
                last_stream[item.thread] = ops[item.ops[-1]].stream
        elif item.kind == SYNC:
            # the last GPU operation to end while the call was blocked is what it waited for
            j = bisect.bisect_right(end_times, te + SLACK_US) - 1
            if j >= 0 and end_times[j] > item.ts:
                done, op = ends[j]
                item.waited, item.post = True, max(0.0, te - done)
                item.scope = None if item.api in DEVICE_WIDE else ops[op].stream
            else:
                item.scope = None if item.api in DEVICE_WIDE else last_stream.get(item.thread)


def _gpu_order(items: list[HostItem], ops: list[GpuOp]) -> tuple[float, float]:
    """Each operation's launch latency, gap and cross-stream dependency; the medians."""
    by_stream: dict[Any, list[int]] = defaultdict(list)
    for i, op in enumerate(ops):
        by_stream[op.stream].append(i)
    ends = sorted((op.start + op.dur, i) for i, op in enumerate(ops))
    end_times = [e for e, _ in ends]
    latencies, gaps = [], []
    pending: list[int] = []
    for indexes in by_stream.values():
        prev_end = None
        for i in indexes:
            op = ops[i]
            launch = items[op.launch].ts if op.launch >= 0 else None
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
