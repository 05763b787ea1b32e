"""Replay a Timeline, as measured or edited, and say how long the window takes.

One pass in measured order. Each host thread keeps its own clock; a CPU item
advances it by its cost; a launch advances it by the call's cost and queues GPU
operations, which start when they are ready (launch start + their latency), their
stream is free (+ the GPU's own gap) and the operation they depended on has
ended; a blocking call advances the clock to the end of the GPU work it waits
for (+ the measured wake-up latency). Operations queued before the window start
no earlier than measured. An edit (a Plan) changes costs, durations, gaps and
which calls block; nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.replay.timeline import CPU, LAUNCH, SYNC, Timeline


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
            if item.kind == CPU and item.tag == "data":
                own *= data_scale
            elif item.kind in (CPU, LAUNCH):
                own *= host_scale
            cost.append(own)
        return cls(
            cost=cost,
            blocks=[item.kind in (SYNC,) or item.waited for item in timeline.items],
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
    # with run(record=True): each operation's (start, end) and each host item's start, replayed
    op_spans: list[tuple[float, float]] | None = None
    item_starts: list[float] | None = None


def run(timeline: Timeline, plan: Plan, record: bool = False) -> Result:
    items, ops = timeline.items, timeline.ops
    starts: list[float] | None = [] if record else None
    clock: dict[int, float] = {}
    tail: dict[object, float] = {}
    ends: list[float | None] = [None] * len(ops)
    intervals: list[tuple[float, float]] = []
    kernels: list[tuple[float, float]] = []
    prequeued = sorted((op.start, i) for i, op in enumerate(ops) if plan.launch_at[i] < 0)
    next_pre = 0
    # operations queued by an item (chains may move an operation to an earlier item)
    queued: dict[int, list[int]] = {}
    for j, at in enumerate(plan.launch_at):
        if at >= 0:
            queued.setdefault(at, []).append(j)

    def place(j: int, ready: float) -> float:
        op = ops[j]
        start = max(ready, tail.get(op.stream, float("-inf")) + plan.gap[j])
        dep_end = ends[op.dep] if op.dep >= 0 else None
        if dep_end is not None:
            start = max(start, dep_end)
        end = start + plan.dur[j]
        ends[j], tail[op.stream] = end, end
        intervals.append((start, end))
        if op.kind == "k":
            kernels.append((start, end))
        return end

    for index, item in enumerate(items):
        while next_pre < len(prequeued) and prequeued[next_pre][0] <= item.ts:
            start, j = prequeued[next_pre]
            place(j, start)
            next_pre += 1
        now = clock.get(item.thread, item.ts)
        if starts is not None:
            starts.append(now)
        done = now
        for j in queued.get(index, ()):
            done = max(done, place(j, now + plan.ready[j]))
        if item.kind == CPU or not plan.blocks[index]:
            now += plan.cost[index]
        elif item.kind == SYNC:
            if item.scope is None:
                target = max(tail.values(), default=now)
            else:
                target = tail.get(item.scope, now)
            now = max(now + plan.cost[index], target + item.post)
        else:  # a copy that waits for itself
            now = max(now + plan.cost[index], done + item.post)
        clock[item.thread] = now
    for start, j in prequeued[next_pre:]:
        place(j, start)
    main_end = clock.get(timeline.main_thread, timeline.start)
    last_op = max((e for e in ends if e is not None), default=timeline.start)
    spans = [(end - plan.dur[j], end) for j, end in enumerate(ends) if end is not None] if record else None
    return Result(span_us=max(main_end, last_op) - timeline.start, gpu_busy_us=_union_length(intervals),
                  kernel_busy_us=_union_length(kernels), op_spans=spans, item_starts=starts)


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, block_start, block_end = 0.0, None, None
    for start, end in sorted(intervals):
        if block_end is None or start > block_end:
            if block_end is not None and block_start is not None:
                total += block_end - block_start
            block_start, block_end = start, end
        else:
            block_end = max(block_end, end)
    if block_end is not None and block_start is not None:
        total += block_end - block_start
    return total
