"""Replay a Timeline, as measured or edited, and say how long the window takes.

One pass in measured order. Each host thread keeps its own clock; a CPU item
advances it by its cost; a launch advances it by the call's cost and queues GPU
operations, which start when they are ready (launch start + their latency), their
stream is free (+ the GPU's own gap) and the operation they depended on has
ended; a blocking call advances the clock to the end of the GPU work it waits
for (+ the measured wake-up latency). Operations queued before the window start
no earlier than measured. An edit (a Plan) changes costs, durations, gaps and
which calls block; nothing else.

Most items only move their thread's clock on (Python, dispatch, a call that queued
nothing and does not block): the pass visits one by one only the items where
something else happens (a launch, a blocking call, work queued before the window
placed, a thread's first item, a start asked for) and adds the costs between them in
a tight loop, in the same order: the clocks are those of a visit to every item, to the
last bit. What does not depend on the plan (which thread, which stream, the kernels)
is taken from the timeline once (`Layout`) and shared by every replay of it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from gpudoctor.collectors.intervals import blocks, sequential_sum
from gpudoctor.replay.items import CPU, DATA, LAUNCH, SYNC
from gpudoctor.replay.timeline import Timeline


@dataclass
class Plan:
    """Per-item and per-operation numbers a replay uses (the measured ones, or edited)."""

    cost: list[float]  # host time an item takes when nothing blocks it, us
    blocks: list[bool]  # SYNC / BLOCKING_COPY: waits for the GPU
    ready: list[float]  # per operation: from its launch call's start until it may start, us
    gap: list[float]  # per operation: the GPU's gap after its stream's previous operation, us
    dur: list[float]  # per operation: GPU duration, us
    launch_at: list[int]  # per operation: the item whose clock launches it (chains share one)

    @classmethod
    def measured(cls, timeline: Timeline, host_scale: float = 1.0, data_scale: float = 1.0) -> Plan:
        """The measured costs; host work (CPU outside data waits, launch calls) times `host_scale`,
        data waits times `data_scale` (both 1 unless calibrated to the unprofiled steps)."""
        known = arrays(timeline)
        kind, waited = known.kind, known.waited
        # a call that waited for the GPU costs the time from the GPU's end to its return
        own = np.where((kind != CPU) & (kind != LAUNCH) & waited, known.post, known.dur)
        own = np.where(known.data, own * data_scale, own)
        own = np.where(~known.data & ((kind == CPU) | (kind == LAUNCH)), own * host_scale, own)
        return cls(
            cost=own.tolist(),
            blocks=((kind == SYNC) | waited).tolist(),
            ready=[op.ready_offset for op in timeline.ops],
            gap=[op.gap for op in timeline.ops],
            dur=[op.dur for op in timeline.ops],
            launch_at=[op.launch for op in timeline.ops],
        )

    def copy(self) -> Plan:
        return Plan(list(self.cost), list(self.blocks), list(self.ready), list(self.gap), list(self.dur),
                    list(self.launch_at))


@dataclass(frozen=True)
class Result:
    span_us: float  # window start to the later of the main thread's end and the GPU's last end
    gpu_busy_us: float  # union of every GPU operation's interval
    kernel_busy_us: float = 0.0  # union of the kernels' intervals: when the SMs had work
    # with run(record=True): each operation's replayed end less its duration, and its end
    op_starts: np.ndarray | None = None
    op_ends: np.ndarray | None = None
    # the replayed start of each item run() was asked about (its `starts_of`)
    item_starts: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    """What a replay reads of a timeline whatever the plan, as plain lists."""

    thread: list[int]  # per item
    kind: list[int]  # per item
    ts: list[float]  # per item, measured start (ascending)
    scope: list[object]  # per item: the stream a sync waits on, None for every stream
    post: list[float]  # per item
    firsts: list[int]  # each thread's first item
    host_waits: list[int]  # the items that may block (SYNC, BLOCKING_COPY, LAUNCH: as the plan says)
    stream: list[object]  # per operation
    dep: list[int]  # per operation
    start: list[float]  # per operation, measured
    kernels: np.ndarray  # the operations that are kernels
    one_thread: bool

    @classmethod
    def of(cls, timeline: Timeline) -> Layout:
        host, ops = timeline.host, timeline.ops
        firsts: dict[int, int] = {}
        for index, number in enumerate(host.thread):
            firsts.setdefault(number, index)
        return cls(thread=host.thread, kind=host.kind, ts=host.ts, scope=host.scope, post=host.post,
                   firsts=sorted(firsts.values()), host_waits=[i for i, kind in enumerate(host.kind) if kind != CPU],
                   stream=[op.stream for op in ops], dep=[op.dep for op in ops], start=[op.start for op in ops],
                   kernels=np.array([op.kind == "k" for op in ops], dtype=bool), one_thread=len(firsts) <= 1)


@dataclass(frozen=True)
class HostArrays:
    """A timeline's host columns the plans are computed from, as arrays."""

    kind: np.ndarray
    waited: np.ndarray
    dur: np.ndarray
    post: np.ndarray
    data: np.ndarray  # DataLoader waits


def arrays(timeline: Timeline) -> HostArrays:
    """The timeline's HostArrays, taken once."""
    found = timeline.cache.get("arrays")
    if not isinstance(found, HostArrays):
        host = timeline.host
        kind = np.array(host.kind, dtype=np.int64)
        found = timeline.cache["arrays"] = HostArrays(
            kind=kind, waited=np.array(host.waited, dtype=bool), dur=np.array(host.dur, dtype=np.float64),
            post=np.array(host.post, dtype=np.float64),
            data=(kind == CPU) & np.array([tag == DATA for tag in host.tag], dtype=bool))
    return found


def layout(timeline: Timeline) -> Layout:
    """The timeline's Layout, taken once."""
    found = timeline.cache.get("layout")
    if not isinstance(found, Layout):
        found = timeline.cache["layout"] = Layout.of(timeline)
    return found


def run(timeline: Timeline, plan: Plan, record: bool = False, starts_of: Iterable[int] = ()) -> Result:
    """Replay `plan`; with `record`, each operation's replayed span; the replayed start of the
    items `starts_of` (positions in timeline.host)."""
    shape = layout(timeline)
    count = len(shape.thread)
    cost, blocking, launch_at = plan.cost, plan.blocks, plan.launch_at
    queued, placed_before = _queues(timeline, shape, launch_at)
    kinds = shape.kind
    asked = set(starts_of)
    visits = sorted({*queued, *placed_before, *shape.firsts, *asked,
                     *(i for i in shape.host_waits if blocking[i])})
    visits = [i for i in visits if i < count]
    clock: dict[int, float] = {}
    gpu = _Streams(shape, plan)
    tail, place = gpu.tail, gpu.place
    ready = plan.ready
    threads, posts, scopes, item_ts = shape.thread, shape.post, shape.scope, shape.ts
    one_thread = shape.one_thread
    item_starts: dict[int, float] = {}
    nothing: tuple[int, ...] = ()
    done_to = 0  # the items before this one have moved their clocks
    for index in visits:
        if done_to < index:  # the items between: each moves its thread's clock by its cost
            if one_thread:
                thread = threads[done_to]
                now = clock[thread]
                for own in cost[done_to:index]:
                    now += own
                clock[thread] = now
            else:
                for i in range(done_to, index):
                    clock[threads[i]] += cost[i]
        done_to = index + 1
        for j in placed_before.get(index, nothing):
            place(j, shape.start[j])
        thread = threads[index]
        now = clock.get(thread, item_ts[index])
        if index in asked:
            item_starts[index] = now
        done = gpu.queue(queued[index], now, ready) if index in queued else now
        kind = kinds[index]
        if kind == CPU or not blocking[index]:
            now += cost[index]
        elif kind == SYNC:
            scope = scopes[index]
            target = max(tail.values(), default=now) if scope is None else tail.get(scope, now)
            now = max(now + cost[index], target + posts[index])
        else:  # a copy that waits for itself
            now = max(now + cost[index], done + posts[index])
        clock[thread] = now
    for i in range(done_to, count):
        clock[threads[i]] += cost[i]
    for j in placed_before.get(count, nothing):
        place(j, shape.start[j])
    return _result(timeline, clock.get(timeline.main_thread, timeline.start), gpu.starts, gpu.ends, plan.dur,
                   record, item_starts)


class _Streams:
    """The GPU side of a replay: each stream's tail, each operation's start and end."""

    def __init__(self, shape: Layout, plan: Plan) -> None:
        self.tail: dict[object, float] = {}
        self.starts: list[float] = [0.0] * len(plan.dur)
        self.ends: list[float | None] = [None] * len(plan.dur)
        self.gap, self.dur, self.streams, self.deps = plan.gap, plan.dur, shape.stream, shape.dep

    def queue(self, operations: list[int], now: float, ready: list[float]) -> float:
        """Place the operations one call queues at `now` (each `ready` after it), in order, as
        `place` does one by one (written out: the replay's hottest loop); the latest end, or now."""
        tail, gaps, durations, streams, deps, starts, ends = self.tail, self.gap, self.dur, self.streams, self.deps, \
            self.starts, self.ends
        tail_at = tail.get
        done = now
        for j in operations:
            stream = streams[j]
            start = now + ready[j]
            free = tail_at(stream, _MINUS_INF) + gaps[j]
            if free > start:  # max(start, free) keeps the first of equals, and so does this
                start = free
            dep = deps[j]
            if dep >= 0:
                dep_end = ends[dep]
                if dep_end is not None and dep_end > start:
                    start = dep_end
            end = start + durations[j]
            starts[j], ends[j], tail[stream] = start, end, end
            if end > done:
                done = end
        return done

    def place(self, j: int, ready_at: float) -> float:
        """Operation j starts once ready, its stream free (+ the gap) and its dependency done."""
        stream = self.streams[j]
        start = max(ready_at, self.tail.get(stream, _MINUS_INF) + self.gap[j])
        dep = self.deps[j]
        if dep >= 0:
            dep_end = self.ends[dep]
            if dep_end is not None:
                start = max(start, dep_end)
        end = start + self.dur[j]
        self.starts[j], self.ends[j], self.tail[stream] = start, end, end
        return end


_MINUS_INF = float("-inf")


def _result(timeline: Timeline, main_end: float, starts: list[float], ends: list[float | None], dur: list[float],
            record: bool, item_starts: dict[int, float]) -> Result:
    if None in ends:
        placed = [j for j, end in enumerate(ends) if end is not None]
        op_starts = np.array([starts[j] for j in placed], dtype=np.float64)
        op_ends = np.array([ends[j] for j in placed], dtype=np.float64)
        kernels = layout(timeline).kernels[placed]
        durations = np.array([dur[j] for j in placed], dtype=np.float64)
    else:  # every operation placed (the usual replay)
        op_starts = np.array(starts, dtype=np.float64)
        op_ends = np.array(ends, dtype=np.float64)
        kernels = layout(timeline).kernels
        durations = np.array(dur, dtype=np.float64)
    last_op = float(op_ends.max()) if len(op_ends) else timeline.start
    return Result(span_us=max(main_end, last_op) - timeline.start, gpu_busy_us=_union_length(op_starts, op_ends),
                  kernel_busy_us=_union_length(op_starts[kernels], op_ends[kernels]),
                  op_starts=op_ends - durations if record else None, op_ends=op_ends if record else None,
                  item_starts=item_starts)


def _queues(timeline: Timeline, shape: Layout,
            launch_at: list[int]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """(the operations each item queues: chains may move them to an earlier item; the operations
    queued before the window, by the item they are placed before: the first that does not start
    before them), the same for every plan that moves no operation (kept for the timeline)."""
    known = timeline.cache.get("queues")
    if isinstance(known, tuple) and known[0] == launch_at:
        return known[1], known[2]
    queued: dict[int, list[int]] = {}
    prequeued: list[tuple[float, int]] = []  # placed at their measured start
    for j, at in enumerate(launch_at):
        if at >= 0:
            queued.setdefault(at, []).append(j)
        else:
            prequeued.append((shape.start[j], j))
    prequeued.sort()
    placed_before: dict[int, list[int]] = {}
    for start, j in prequeued:
        placed_before.setdefault(bisect.bisect_left(shape.ts, start), []).append(j)
    timeline.cache["queues"] = (list(launch_at), queued, placed_before)
    return queued, placed_before


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """The time covered by the intervals, the blocks' lengths added in time order."""
    if not len(starts):
        return 0.0
    order = np.lexsort((ends, starts))
    block_starts, block_ends, _ = blocks(starts[order], ends[order])
    return sequential_sum(block_ends - block_starts)
