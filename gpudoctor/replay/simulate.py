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
from gpudoctor.replay.timeline import CPU, DATA, LAUNCH, SYNC, Timeline


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
        cost = []
        for item in timeline.items:
            own = item.post if item.kind != CPU and item.kind != LAUNCH and item.waited else item.dur
            if item.kind == CPU and item.tag == DATA:
                own *= data_scale
            elif item.kind in (CPU, LAUNCH):
                own *= host_scale
            cost.append(own)
        return cls(
            cost=cost,
            blocks=[item.kind == SYNC or item.waited for item in timeline.items],
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
        items, ops = timeline.items, timeline.ops
        thread = [item.thread for item in items]
        firsts: dict[int, int] = {}
        for index, number in enumerate(thread):
            firsts.setdefault(number, index)
        return cls(thread=thread, kind=[item.kind for item in items], ts=[item.ts for item in items],
                   scope=[item.scope for item in items], post=[item.post for item in items],
                   firsts=sorted(firsts.values()), host_waits=[i for i, item in enumerate(items) if item.kind != CPU],
                   stream=[op.stream for op in ops], dep=[op.dep for op in ops], start=[op.start for op in ops],
                   kernels=np.array([op.kind == "k" for op in ops], dtype=bool), one_thread=len(firsts) <= 1)


def layout(timeline: Timeline) -> Layout:
    """The timeline's Layout, taken once."""
    found = timeline.cache.get("layout")
    if not isinstance(found, Layout):
        found = timeline.cache["layout"] = Layout.of(timeline)
    return found


def run(timeline: Timeline, plan: Plan, record: bool = False, starts_of: Iterable[int] = ()) -> Result:
    """Replay `plan`; with `record`, each operation's replayed span; the replayed start of the
    items `starts_of` (positions in timeline.items)."""
    shape = layout(timeline)
    count = len(shape.thread)
    cost, blocking, launch_at = plan.cost, plan.blocks, plan.launch_at
    queued: dict[int, list[int]] = {}  # the operations each item queues (chains may move them to an earlier item)
    prequeued: list[tuple[float, int]] = []  # queued before the window: placed at their measured start
    for j, at in enumerate(launch_at):
        if at >= 0:
            queued.setdefault(at, []).append(j)
        else:
            prequeued.append((shape.start[j], j))
    prequeued.sort()
    # a prequeued operation is placed before the first item that does not start before it
    placed_before: dict[int, list[int]] = {}
    for start, j in prequeued:
        placed_before.setdefault(bisect.bisect_left(shape.ts, start), []).append(j)
    kinds = shape.kind
    asked = set(starts_of)
    visits = sorted({*queued, *placed_before, *shape.firsts, *asked,
                     *(i for i in shape.host_waits if blocking[i])})
    visits = [i for i in visits if i < count]

    clock: dict[int, float] = {}
    tail: dict[object, float] = {}
    starts: list[float] = [0.0] * len(launch_at)
    ends: list[float | None] = [None] * len(launch_at)
    ready, gap, dur = plan.ready, plan.gap, plan.dur
    streams, deps = shape.stream, shape.dep
    minus_inf = float("-inf")

    def place(j: int, ready_at: float) -> float:
        stream = streams[j]
        start = max(ready_at, tail.get(stream, minus_inf) + gap[j])
        dep = deps[j]
        if dep >= 0:
            dep_end = ends[dep]
            if dep_end is not None:
                start = max(start, dep_end)
        end = start + dur[j]
        starts[j], ends[j], tail[stream] = start, end, end
        return end

    threads, posts = shape.thread, shape.post
    item_starts: dict[int, float] = {}
    done_to = 0  # the items before this one have moved their clocks
    for index in visits:
        _advance(clock, threads, cost, done_to, index, shape.one_thread)
        done_to = index + 1
        for j in placed_before.get(index, ()):
            place(j, shape.start[j])
        thread = threads[index]
        now = clock.get(thread, shape.ts[index])
        if index in asked:
            item_starts[index] = now
        done = now
        for j in queued.get(index, ()):
            done = max(done, place(j, now + ready[j]))
        kind = kinds[index]
        if kind == CPU or not blocking[index]:
            now += cost[index]
        elif kind == SYNC:
            scope = shape.scope[index]
            target = max(tail.values(), default=now) if scope is None else tail.get(scope, now)
            now = max(now + cost[index], target + posts[index])
        else:  # a copy that waits for itself
            now = max(now + cost[index], done + posts[index])
        clock[thread] = now
    _advance(clock, threads, cost, done_to, count, shape.one_thread)
    for j in placed_before.get(count, ()):
        place(j, shape.start[j])
    main_end = clock.get(timeline.main_thread, timeline.start)
    placed = [j for j, end in enumerate(ends) if end is not None]
    op_starts = np.array([starts[j] for j in placed], dtype=np.float64)
    op_ends = np.array([ends[j] for j in placed], dtype=np.float64)
    last_op = float(op_ends.max()) if len(op_ends) else timeline.start
    kernels = shape.kernels[placed] if len(placed) != len(ends) else shape.kernels
    durations = np.array([dur[j] for j in placed], dtype=np.float64)
    return Result(span_us=max(main_end, last_op) - timeline.start, gpu_busy_us=_union_length(op_starts, op_ends),
                  kernel_busy_us=_union_length(op_starts[kernels], op_ends[kernels]),
                  op_starts=op_ends - durations if record else None, op_ends=op_ends if record else None,
                  item_starts=item_starts)


def _advance(clock: dict[int, float], threads: list[int], cost: list[float], begin: int, end: int,
             one_thread: bool) -> None:
    """Move the clocks by the costs of the items begin..end-1, which neither queue nor block."""
    if begin >= end:
        return
    if one_thread:
        thread = threads[begin]
        now = clock[thread]
        for own in cost[begin:end]:
            now += own
        clock[thread] = now
        return
    for i in range(begin, end):
        clock[threads[i]] += cost[i]


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """The time covered by the intervals, the blocks' lengths added in time order."""
    if not len(starts):
        return 0.0
    order = np.lexsort((ends, starts))
    block_starts, block_ends, _ = blocks(starts[order], ends[order])
    return sequential_sum(block_ends - block_starts)
