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
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.collectors.kineto_names import KERNEL_LAUNCH_APIS, GRAPH_LAUNCH_APIS, SYNC_APIS, classify_gemm, copy_kind

CPU, LAUNCH, SYNC, BLOCKING_COPY = 0, 1, 2, 3
PYTHON, DISPATCH, DATA = "python", "dispatch", "data"

SLACK_US = 3.0  # host and GPU clocks agree to a few microseconds
QUEUED_GAP_MAX_US = 30.0  # HTA: a shorter gap after the previous operation is the GPU's own front end
DEVICE_WIDE = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize",
                         "cudaFree", "cudaFreeHost"})
AGENT_WINDOW_FRAME = "gpudoctor/agent/profiler"  # gpudoctor closing its own window
DATA_ANNOTATION = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
_VERSION = re.compile(r"_v\d+$")
_GPU = {"kernel": "k", "gpu_memcpy": "c", "memcpy": "c", "gpu_memset": "s", "memset": "s"}
_API = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
_OPS = frozenset({"cpu_op", "operator"})


@dataclass(slots=True)
class HostItem:
    kind: int  # CPU | LAUNCH | SYNC | BLOCKING_COPY
    thread: int
    ts: float  # measured start, us
    dur: float  # measured duration, us
    tag: str = PYTHON  # CPU items: python | dispatch | data
    ops: list[int] = field(default_factory=list)  # GPU operations this call queued
    scope: Any = None  # SYNC: the stream it waited on; None = every stream
    waited: bool = False  # the call was measured blocking on GPU work
    post: float = 0.0  # from the end of the awaited GPU work to the call's return, us
    agent: bool = False  # gpudoctor's own (closing the profiler window): never edited
    api: str = ""


@dataclass(slots=True)
class GpuOp:
    stream: Any  # (device, stream)
    kind: str  # k | c | s
    start: float
    dur: float
    name: str
    nbytes: float = 0.0
    copy: str | None = None  # HtoD_pageable, DtoH_pinned, ... for copies
    gemm: str | None = None  # fp32 | tensor_core | other for matmul kernels
    launch: int = -1  # index of the HostItem that queued it; -1: queued before the window
    ready_offset: float = 0.0  # from its launch call's start until it could start, us
    gap: float = 0.0  # the GPU's own gap after the stream's previous operation, us
    dep: int = -1  # an operation on another stream it was measured waiting for


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

    @property
    def measured_span_us(self) -> float:
        return self.end - self.start


class _Thread:
    """What one host thread recorded."""

    def __init__(self) -> None:
        self.first, self.last = float("inf"), float("-inf")
        self.calls: list[tuple[float, float, str, Any]] = []  # ts, dur, api, correlation
        self.ops: list[tuple[float, float]] = []
        self.data: list[tuple[float, float]] = []
        self.agent: list[tuple[float, float]] = []

    def see(self, ts: float, end: float) -> None:
        self.first, self.last = min(self.first, ts), max(self.last, end)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


def build(events: list) -> Timeline | None:
    """The model of one trace's events, or None when they hold no host thread to replay."""
    threads: dict[Any, _Thread] = defaultdict(_Thread)
    ops: list[GpuOp] = []
    corr_ops: dict[Any, list[int]] = defaultdict(list)
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        ts, dur, name = _number(event.get("ts")), _number(event.get("dur")), event.get("name")
        if ts is None or dur is None or dur < 0 or not isinstance(name, str):
            continue
        category = str(event.get("cat", "")).lower()
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        kind = _GPU.get(category)
        if kind is not None:
            op = GpuOp(stream=(args.get("device", event.get("pid")), args.get("stream", event.get("tid"))),
                       kind=kind, start=ts, dur=dur, name=name)
            if kind == "c":
                op.nbytes = _number(args.get("bytes")) or 0.0
                op.copy = copy_kind(name)
            elif kind == "k":
                op.gemm = classify_gemm(name)
            if args.get("correlation") is not None:
                corr_ops[args["correlation"]].append(len(ops))
            ops.append(op)
            continue
        if category not in _API and category not in _OPS and category not in ("user_annotation", "python_function"):
            continue
        thread = threads[(event.get("pid"), event.get("tid"))]
        thread.see(ts, ts + dur)
        if category in _API:
            thread.calls.append((ts, dur, _VERSION.sub("", name), args.get("correlation")))
        elif category in _OPS:
            thread.ops.append((ts, ts + dur))
        elif category == "user_annotation":
            if DATA_ANNOTATION.match(name):
                thread.data.append((ts, ts + dur))
        elif AGENT_WINDOW_FRAME in name.replace("\\", "/"):
            thread.agent.append((ts, ts + dur))
    active = {key: t for key, t in threads.items() if t.calls or t.data}
    if not active:
        return None
    order = sorted(range(len(ops)), key=lambda i: (ops[i].start, ops[i].start + ops[i].dur))
    remap = {old: new for new, old in enumerate(order)}
    ops = [ops[i] for i in order]
    corr_ops = {c: sorted(remap[i] for i in idx) for c, idx in corr_ops.items()}
    items: list[HostItem] = []
    launches_by_thread: dict[int, int] = {}
    for number, thread in enumerate(active.values()):
        launches_by_thread[number] = _thread_items(number, thread, corr_ops, ops, items)
    items.sort(key=lambda it: (it.ts, it.thread))
    for index, item in enumerate(items):
        for op in item.ops:
            ops[op].launch = index
    _link_blocking(items, ops)
    latency, gap = _gpu_order(items, ops)
    main = max(launches_by_thread, key=lambda n: (launches_by_thread[n], -n))
    main_items = [it for it in items if it.thread == main]
    start = min([main_items[0].ts] + [op.start for op in ops[:1]])
    end = max([main_items[-1].ts + main_items[-1].dur] + [op.start + op.dur for op in ops])
    return Timeline(items=items, ops=ops, main_thread=main, start=start, end=end,
                    launch_latency_us=latency, queued_gap_us=gap, threads=len(active))


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _overlap(spans: list[tuple[float, float]], starts: list[float], a: float, b: float) -> float:
    """Length of [a, b) covered by sorted disjoint `spans` (starts = their start times)."""
    total = 0.0
    i = max(0, bisect.bisect_right(starts, a) - 1)
    while i < len(spans) and spans[i][0] < b:
        lo, hi = max(a, spans[i][0]), min(b, spans[i][1])
        if hi > lo:
            total += hi - lo
        i += 1
    return total


def _inside(spans: list[tuple[float, float]], starts: list[float], t: float) -> bool:
    i = bisect.bisect_right(starts, t) - 1
    return i >= 0 and spans[i][0] <= t <= spans[i][1]


def _thread_items(number: int, thread: _Thread, corr_ops: dict[Any, list[int]], ops: list[GpuOp],
                  items: list[HostItem]) -> int:
    """Append the thread's items; return how many launch calls it made."""
    data = _union(thread.data)
    data_starts = [s for s, _ in data]
    launch_ts = sorted(ts for ts, _, api, corr in thread.calls if corr in corr_ops)
    # outermost operator spans that launched GPU work: their CPU time is dispatch overhead
    dispatch = [(a, b) for a, b in _union(thread.ops)
                if bisect.bisect_right(launch_ts, b) > bisect.bisect_left(launch_ts, a)]
    dispatch_starts = [s for s, _ in dispatch]
    agent = _union(thread.agent)
    agent_starts = [s for s, _ in agent]

    def cpu(a: float, b: float) -> None:
        if b <= a:
            return
        in_data = _overlap(data, data_starts, a, b)
        in_dispatch = _overlap(dispatch, dispatch_starts, a, b)
        rest = max(0.0, (b - a) - in_data - in_dispatch)
        for tag, length in ((DATA, in_data), (DISPATCH, in_dispatch), (PYTHON, rest)):
            if length > 0:
                items.append(HostItem(CPU, number, a, length, tag=tag))

    cursor, launches = thread.first, 0
    last: HostItem | None = None
    for ts, dur, api, corr in sorted(thread.calls):
        linked = corr_ops.get(corr, []) if corr is not None else []
        if last is not None and ts + dur <= cursor:
            last.ops.extend(linked)  # a driver call inside the runtime call that made it
            continue
        cpu(cursor, ts)
        in_data = _inside(data, data_starts, ts)
        tag = DATA if in_data else DISPATCH if _inside(dispatch, dispatch_starts, ts) else PYTHON
        if linked:
            item = HostItem(LAUNCH, number, ts, dur, tag=tag, ops=list(linked), api=api)
            launches += api in KERNEL_LAUNCH_APIS or api in GRAPH_LAUNCH_APIS
        elif api in SYNC_APIS:
            item = HostItem(SYNC, number, ts, dur, tag=tag, api=api,
                            agent=_inside(agent, agent_starts, ts))
        else:
            item = HostItem(CPU, number, ts, dur, tag=tag, api=api)
        items.append(item)
        last = item
        cursor = max(cursor, ts + dur)
    cpu(cursor, thread.last)
    return launches


def _link_blocking(items: list[HostItem], ops: list[GpuOp]) -> None:
    """Mark copy calls that waited for their own copy, and what each sync waited for."""
    ends = sorted((op.start + op.dur, i) for i, op in enumerate(ops))
    end_times = [e for e, _ in ends]
    last_stream: dict[int, Any] = {}
    for item in items:
        te = item.ts + item.dur
        if item.kind == LAUNCH:
            copies = [ops[i] for i in item.ops if ops[i].kind != "k"]
            done = max((op.start + op.dur for op in copies), default=None)
            if done is not None and done > item.ts + SLACK_US and done <= te + SLACK_US:
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
    for i, op in enumerate(ops):
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
