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
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.collectors.kineto_names import (
    _FRAME_NAME,
    DATA_ANNOTATION,
    GRAPH_LAUNCH_APIS,
    KERNEL_LAUNCH_APIS,
    OPTIMIZER_ANNOTATION,
    SYNC_APIS,
    classify_gemm,
    copy_kind,
    frame_kind,
)

CPU, LAUNCH, SYNC, BLOCKING_COPY = 0, 1, 2, 3
# CPU item tags: Python in torch or another library (framework glue), operator dispatch of
# GPU work, a DataLoader wait, and Python in the user's own frames (with_stack traces only)
PYTHON, DISPATCH, DATA, USER = "python", "dispatch", "data", "user"

SLACK_US = 3.0  # host and GPU clocks agree to a few microseconds
QUEUED_GAP_MAX_US = 30.0  # HTA: a shorter gap after the previous operation is the GPU's own front end
DEVICE_WIDE = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize",
                         "cudaFree", "cudaFreeHost"})
AGENT_WINDOW_FRAME = "gpudoctor/agent/profiler"  # gpudoctor closing its own window
HELPER_IDLE_US = 50.0  # a helper thread's time outside any operator longer than this is idle, not work
_VERSION = re.compile(r"_v\d+$")


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
    read: tuple[float, float] | None = None  # SYNC: the operator that only read a value back (.item(), .cpu())
    optimizer: bool = False  # inside an optimizer's step(): what a fused optimizer replaces, not a compiler


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
    stacks: bool = False  # Python frames were traced (with_stack): framework and user Python told apart

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
        self.optimizer: list[tuple[float, float]] = []
        self.agent: list[tuple[float, float]] = []
        self.frames: list[tuple[float, float, bool]] = []  # Python frames: start, end, the user's own?
        self.annotations = 0  # record_function ranges (DataLoader, optimizer, ProfilerStep)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def build(source: Any) -> Timeline | None:
    """The model of one trace's events (a TraceIndex, or what trace_decode.index_events
    takes), or None when they hold no host thread to replay."""
    from gpudoctor.collectors.trace_decode import (
        ANNOTATION,
        API,
        FRAME,
        GPU_KINDS,
        OP,
        index_events,
    )

    trace_index = index_events(source)
    threads: dict[Any, _Thread] = defaultdict(_Thread)
    first_seen: dict[Any, int] = {}
    ops: list[GpuOp] = []
    corr_ops: dict[Any, list[int]] = defaultdict(list)
    gpu = trace_index.gpu
    for kind_code, start, dur, name, device, stream, nbytes, correlation in zip(
            gpu.kind.tolist(), gpu.ts.tolist(), gpu.dur.tolist(), gpu.names, gpu.resolved("device", "pid"),
            gpu.resolved("stream", "tid"), gpu.bytes, gpu.correlation):
        kind = GPU_KINDS[kind_code]
        op = GpuOp(stream=(device, stream), kind=kind, start=start, dur=dur, name=name)
        if kind == "c":
            op.nbytes = _number(nbytes) or 0.0
            op.copy = copy_kind(name)
        elif kind == "k":
            op.gemm = classify_gemm(name)
        if correlation is not None:
            corr_ops[correlation].append(len(ops))
        ops.append(op)
    apis: dict[str, str] = {}
    own_frames: dict[str, bool] = {}  # a frame's name -> the user's own code?
    for host_events in (trace_index.api, trace_index.ops, trace_index.frames):
        for key, pos, ts, dur, name, category, correlation in zip(
                zip(host_events.pids, host_events.tids), host_events.pos.tolist(), host_events.ts.tolist(),
                host_events.dur.tolist(), host_events.names, host_events.kind.tolist(), host_events.correlation):
            thread = threads[key]
            if key not in first_seen or pos < first_seen[key]:
                first_seen[key] = pos
            if ts < thread.first:
                thread.first = ts
            if ts + dur > thread.last:
                thread.last = ts + dur
            if category == API:
                api = apis.get(name)
                if api is None:
                    api = apis[name] = _VERSION.sub("", name)
                thread.calls.append((ts, dur, api, correlation))
            elif category == OP:
                thread.ops.append((ts, ts + dur))
            elif category == ANNOTATION:
                thread.annotations += 1
                if DATA_ANNOTATION.match(name):
                    thread.data.append((ts, ts + dur))
                elif name.startswith(OPTIMIZER_ANNOTATION):
                    thread.optimizer.append((ts, ts + dur))
            elif category == FRAME:
                if AGENT_WINDOW_FRAME in name.replace("\\", "/"):
                    thread.agent.append((ts, ts + dur))
                own = own_frames.get(name)
                if own is None:
                    match = _FRAME_NAME.match(name)
                    own = own_frames[name] = match is not None and frame_kind(match["file"]) in ("user", "stdlib")
                thread.frames.append((ts, ts + dur, own))
    threads = defaultdict(_Thread, sorted(threads.items(), key=lambda kv: first_seen[kv[0]]))
    active = {key: t for key, t in threads.items() if t.calls or t.data}
    if not active:
        return None
    order = sorted(range(len(ops)), key=lambda i: (ops[i].start, ops[i].start + ops[i].dur))
    remap = {old: new for new, old in enumerate(order)}
    ops = [ops[i] for i in order]
    corr_ops = {c: [remap[idx[0]]] if len(idx) == 1 else sorted(remap[i] for i in idx) for c, idx in corr_ops.items()}
    per_thread: dict[int, list[HostItem]] = {}
    launches_by_thread: dict[int, int] = {}
    for number, thread in enumerate(active.values()):
        per_thread[number] = []
        launches_by_thread[number] = _thread_items(number, thread, corr_ops, ops, per_thread[number])
    # the stepping thread: the one running Python (traced frames) and the loop's own ranges
    # (DataLoader waits, optimizer steps); the autograd worker often launches more kernels
    threads_list = list(active.values())
    main = max(launches_by_thread, key=lambda n: (bool(threads_list[n].frames), threads_list[n].annotations,
                                                  launches_by_thread[n], -n))
    for number in list(per_thread):
        if number != main and launches_by_thread[number]:
            per_thread[number] = _merge_helper(per_thread[main], per_thread[number], main)
    items = sorted(
        (it for thread_items in per_thread.values() for it in thread_items), key=lambda it: (it.ts, it.thread)
    )
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
                    stacks=any(t.frames for t in active.values()))


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


def _user_spans(frames: list[tuple[float, float, bool]]) -> list[tuple[float, float]]:
    """Where the innermost Python frame is the user's own code (not torch, a library or a builtin)."""
    spans: list[tuple[float, float]] = []
    stack: list[tuple[float, float, bool]] = []
    cursor = float("-inf")

    def emit(until: float) -> None:
        nonlocal cursor
        if stack and stack[-1][2] and until > cursor:
            spans.append((cursor, until))
        cursor = max(cursor, until)

    for frame in sorted(frames, key=lambda f: (f[0], -f[1])):
        while stack and stack[-1][1] <= frame[0]:
            emit(stack[-1][1])
            stack.pop()
        emit(frame[0])
        stack.append(frame)
    while stack:
        emit(stack[-1][1])
        stack.pop()
    return _union(spans)


def _inside(spans: list[tuple[float, float]], starts: list[float], t: float) -> bool:
    i = bisect.bisect_right(starts, t) - 1
    return i >= 0 and spans[i][0] <= t <= spans[i][1]


def _thread_items(number: int, thread: _Thread, corr_ops: dict[Any, list[int]], ops: list[GpuOp],
                  items: list[HostItem]) -> int:
    """Append the thread's items; return how many launch calls it made."""
    data = _union(thread.data)
    data_starts = [s for s, _ in data]
    launch_ts = sorted(ts for ts, _, api, corr in thread.calls if corr in corr_ops)
    kernel_ts = sorted(ts for ts, _, api, corr in thread.calls
                       if corr in corr_ops and any(ops[j].kind == "k" for j in corr_ops[corr]))
    read_ts = sorted(ts for ts, _, api, corr in thread.calls
                     if corr in corr_ops and any((ops[j].copy or "").startswith("DtoH") for j in corr_ops[corr]))
    outermost = _union(thread.ops)
    outer_starts = [s for s, _ in outermost]
    # outermost operator spans that launched GPU work: their CPU time is dispatch overhead
    dispatch = [(a, b) for a, b in outermost
                if bisect.bisect_right(launch_ts, b) > bisect.bisect_left(launch_ts, a)]
    dispatch_starts = [s for s, _ in dispatch]

    def read_back(t: float) -> tuple[float, float] | None:
        """The operator around a sync when all it does is read a value back: a device-to-host
        copy and no kernel (``.item()``, ``.cpu()`` of a result)."""
        i = bisect.bisect_right(outer_starts, t) - 1
        if i < 0 or not outermost[i][0] <= t <= outermost[i][1]:
            return None
        a, b = outermost[i]
        reads = bisect.bisect_right(read_ts, b) > bisect.bisect_left(read_ts, a)
        kernels = bisect.bisect_right(kernel_ts, b) > bisect.bisect_left(kernel_ts, a)
        return (a, b) if reads and not kernels else None

    agent = _union(thread.agent)
    agent_starts = [s for s, _ in agent]
    user = _user_spans(thread.frames)
    user_starts = [s for s, _ in user]

    def cpu(a: float, b: float) -> None:
        if b <= a:
            return
        in_data = _overlap(data, data_starts, a, b)
        in_dispatch = _overlap(dispatch, dispatch_starts, a, b)
        in_dispatch = min(in_dispatch, (b - a) - in_data)  # an operator inside a DataLoader wait is data
        rest = max(0.0, (b - a) - in_data - in_dispatch)
        in_user = min(rest, _overlap(user, user_starts, a, b)) if user else 0.0
        at = a  # the pieces of one gap, back to back (their order inside it is not recorded)
        for tag, length in ((DATA, in_data), (DISPATCH, in_dispatch), (USER, in_user), (PYTHON, rest - in_user)):
            if length > 0:
                items.append(HostItem(CPU, number, at, length, tag=tag))
                at += length

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
                            agent=_inside(agent, agent_starts, ts), read=read_back(ts))
        else:
            item = HostItem(CPU, number, ts, dur, tag=tag, api=api)
        items.append(item)
        last = item
        cursor = max(cursor, ts + dur)
    cpu(cursor, thread.last)
    optimizer = _union(thread.optimizer)
    if optimizer:
        starts = [s for s, _ in optimizer]
        for item in items:
            if item.thread == number:
                item.optimizer = _inside(optimizer, starts, item.ts)
    return launches


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
