"""The replay's whole-array shortcuts give the numbers of the walks they replaced, to the last bit:
the covered length of each gap, the calls' order, a replay that visits only the items where
something happens, and the edits' chains, stacked copies and dropped read-backs."""

from __future__ import annotations

import bisect
import random
from pathlib import Path

import numpy as np
import pytest

from gpudoctor.collectors.trace_decode import read_trace
from gpudoctor.replay import edits, rates, threads
from gpudoctor.replay.scenarios import SCENARIOS
from gpudoctor.replay.simulate import Plan, run
from gpudoctor.replay.timeline import BLOCKING_COPY, CPU, DISPATCH, LAUNCH, PYTHON, SYNC, USER, Timeline, build

WINDOWS = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "windows"
EDITS = {name: scenario.edit for name, scenario in SCENARIOS.items()}


def _walk_overlap(spans: list[tuple[float, float]], a: float, b: float) -> float:
    """Length of [a, b) covered by sorted disjoint spans, one span after the other."""
    starts = [s for s, _ in spans]
    total = 0.0
    i = max(0, bisect.bisect_right(starts, a) - 1)
    while i < len(spans) and spans[i][0] < b:
        lo, hi = max(a, spans[i][0]), min(b, spans[i][1])
        if hi > lo:
            total += hi - lo
        i += 1
    return total


def _walk_union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def test_covered_lengths_are_added_as_the_walk_adds_them() -> None:
    rng = random.Random(26)
    raw = [(a, a + rng.choice([0.0, 0.3, 1.7, 10.0])) for a in (rng.uniform(0, 20_000) for _ in range(3000))]
    spans = _walk_union(raw)
    merged = threads._merged(np.array([s for s, _ in raw]), np.array([e for _, e in raw]))
    assert list(zip(merged[0].tolist(), merged[1].tolist())) == spans
    gaps = [(a, a + rng.choice([0.01, 0.5, 5.0, 40.0, 400.0])) for a in (rng.uniform(-10, 20_010) for _ in range(4000))]
    gaps += [(s, e) for s, e in spans[:50]] + [(0.0, 21_000.0)]  # exact span edges, one gap over every span
    a = np.array([g[0] for g in gaps])
    b = np.array([g[1] for g in gaps])
    got = threads._overlaps(merged, a, b).tolist()
    assert got == [_walk_overlap(spans, x, y) for x, y in gaps]
    assert max(int(np.searchsorted(merged[0], y)) - int(np.searchsorted(merged[0], x)) for x, y in gaps) \
        > threads.OVERLAP_ROUNDS  # the gaps past the vectorised rounds are covered too


def test_calls_alike_but_for_their_correlation_sort_as_tuples() -> None:
    events = [{"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
               "args": {"correlation": corr}}
              for name, ts, dur, corr in [("cudaLaunchKernel", 5.0, 2.0, 9), ("cudaMemcpyAsync", 5.0, 2.0, 3),
                                          ("cudaLaunchKernel", 5.0, 2.0, 4), ("cudaLaunchKernel", 1.0, 9.0, 7),
                                          ("cudaLaunchKernel_v7000", 5.0, 1.0, 8)]]
    (thread,) = threads.host_threads(read_index(events))
    rows = list(zip(thread.call_ts.tolist(), thread.call_dur.tolist(), thread.call_api, thread.call_correlation))
    assert rows == sorted(rows) and [r[3] for r in rows] == [7, 8, 4, 9, 3]


def read_index(events: list[dict]) -> object:
    from gpudoctor.collectors.trace_decode import index_events

    return index_events({"traceEvents": events})


def _walk_run(timeline: Timeline, plan: Plan) -> tuple[float, list[float], list[float | None]]:
    """The replay as a visit to every item: (span, each item's start, each operation's end)."""
    items, ops = timeline.items, timeline.ops
    clock: dict[int, float] = {}
    tail: dict[object, float] = {}
    ends: list[float | None] = [None] * len(ops)
    starts: list[float] = []
    prequeued = sorted((op.start, i) for i, op in enumerate(ops) if plan.launch_at[i] < 0)
    queued: dict[int, list[int]] = {}
    for j, at in enumerate(plan.launch_at):
        if at >= 0:
            queued.setdefault(at, []).append(j)

    def place(j: int, ready: float) -> float:
        op = ops[j]
        start = max(ready, tail.get(op.stream, float("-inf")) + plan.gap[j])
        if op.dep >= 0 and ends[op.dep] is not None:
            start = max(start, ends[op.dep])  # type: ignore[type-var]
        ends[j] = tail[op.stream] = start + plan.dur[j]
        return start + plan.dur[j]

    next_pre = 0
    for index, item in enumerate(items):
        while next_pre < len(prequeued) and prequeued[next_pre][0] <= item.ts:
            place(prequeued[next_pre][1], prequeued[next_pre][0])
            next_pre += 1
        now = clock.get(item.thread, item.ts)
        starts.append(now)
        done = now
        for j in queued.get(index, ()):
            done = max(done, place(j, now + plan.ready[j]))
        if item.kind == CPU or not plan.blocks[index]:
            now += plan.cost[index]
        elif item.kind == SYNC:
            target = max(tail.values(), default=now) if item.scope is None else tail.get(item.scope, now)
            now = max(now + plan.cost[index], target + item.post)
        else:
            now = max(now + plan.cost[index], done + item.post)
        clock[item.thread] = now
    for start, j in prequeued[next_pre:]:
        place(j, start)
    last = max((e for e in ends if e is not None), default=timeline.start)
    span = max(clock.get(timeline.main_thread, timeline.start), last) - timeline.start
    return span, starts, ends


@pytest.mark.parametrize("window", ["item_sync", "pageable_copies", "loader_starved_gpu", "item_per_layer"])
def test_the_replay_visits_only_where_something_happens_and_adds_as_a_walk(window: str) -> None:
    timeline = build(read_trace(WINDOWS / f"{window}.trace.json.gz"))
    assert timeline is not None
    asked = sorted({0, len(timeline.items) // 3, len(timeline.items) - 1})
    for name, edit in [("measured", None), *EDITS.items()]:
        plan = Plan.measured(timeline)
        if edit is not None:
            edit(timeline, plan)
        result = run(timeline, plan, record=True, starts_of=asked)
        span, starts, ends = _walk_run(timeline, plan)
        assert result.span_us == span, name
        assert result.item_starts == {i: starts[i] for i in asked}, name
        assert result.op_ends is not None and result.op_ends.tolist() == ends, name


# ---- the edits, as walks over every item (what replay.edits replaced) ----

def _copies(timeline: Timeline, item, prefix: str) -> bool:
    return any((timeline.ops[j].copy or "").startswith(prefix) for j in item.ops)


def _walk_joins(timeline: Timeline, plan: Plan, i: int, optimizer: bool) -> bool:
    """Whether item i may be part of a chain (replay.edits._chains's rules, before module calls)."""
    item = timeline.items[i]
    if not (item.fused if optimizer else not item.optimizer):  # the side chained
        return False
    if item.kind == LAUNCH:
        return not _copies(timeline, item, "HtoD_pageable")
    if item.kind != CPU:
        return False
    if item.tag == DISPATCH:
        return True
    if item.tag == PYTHON:
        return timeline.stacks or plan.cost[i] < edits.GLUE_MAX_US
    return item.tag == USER and plan.cost[i] < edits.GLUE_MAX_US


def _walk_collapse(timeline: Timeline, plan: Plan, optimizer: bool) -> tuple[int, int]:
    chains, current = [], {}
    modules: dict[int, bool] = {}
    for item in timeline.items:
        modules[item.thread] = modules.get(item.thread, False) or item.call >= 0
    for i, item in enumerate(timeline.items):
        joins = _walk_joins(timeline, plan, i, optimizer)
        if not optimizer:  # a loss's backward (outside the model's calls) stays eager
            joins = joins and not item.outside
        if not optimizer and modules.get(item.thread):  # module calls traced: one chain each, nothing outside
            joins = joins and item.call >= 0
            if joins and item.thread in current and timeline.items[current[item.thread][-1]].call != item.call:
                chains.append(current.pop(item.thread))
        if joins:
            current.setdefault(item.thread, []).append(i)
        elif item.thread in current:
            chains.append(current.pop(item.thread))
    chains.extend(current.values())
    changed = count = 0
    for chain in chains:
        launches = [i for i in chain if timeline.items[i].kind == LAUNCH]
        if len(launches) < 2:
            continue
        count += 1
        call = 0.0 if optimizer else rates.graph_call_us(len(launches))  # compile's graph call; a fused step's launch
        if call:
            plan.cost[launches[0]] = call = max(plan.cost[launches[0]], call)
        for i in chain:
            if i != launches[0] and plan.cost[i] > 0:
                plan.cost[i] = 0.0
                changed += 1
            for j in timeline.items[i].ops:
                plan.launch_at[j], plan.ready[j] = launches[0], timeline.launch_latency_us + call
                plan.gap[j] = max(0.0, rates.GRAPH_KERNEL_US - plan.dur[j])
    return changed, count


def _walk_small_copies(timeline: Timeline, plan: Plan) -> int:
    rates_by_kind = edits._copy_rates(timeline.ops)
    pinned = edits._pinned_rate(timeline)[0] or rates.PINNED_BYTES_PER_US
    changed, head, between, consumed, own_sync, rate = 0, {}, {}, {}, {}, {}
    for i, item in enumerate(timeline.items):
        thread = item.thread
        small = item.kind in (LAUNCH, BLOCKING_COPY) and bool(item.ops) and all(
            timeline.ops[j].kind == "c" and (timeline.ops[j].copy or "").startswith("HtoD")
            and timeline.ops[j].nbytes < edits.SMALL_COPY_BYTES for j in item.ops)
        if small:
            consumed[thread] = False
            if thread not in head:
                head[thread], between[thread] = i, []
                kind = timeline.ops[item.ops[0]].copy or ""
                own_sync[thread] = kind.endswith("_pageable")
                rate[thread] = rates_by_kind.get(kind) or pinned
                continue
            first = head[thread]
            for j in item.ops:
                plan.dur[timeline.items[first].ops[0]] += timeline.ops[j].nbytes / rate[thread]
                plan.dur[j], plan.gap[j], plan.launch_at[j] = 0.0, 0.0, first
            plan.cost[i], plan.blocks[i] = 0.0, False
            for k in between[thread]:
                plan.cost[k], plan.blocks[k] = 0.0, False
            between[thread] = []
            own_sync[thread] = False
            changed += 1
        elif thread not in head:
            continue
        elif item.kind == SYNC and not item.agent and own_sync[thread]:
            own_sync[thread] = False
        elif ((item.kind == CPU and item.tag == DISPATCH) or (item.kind == SYNC and not item.agent)
              or (item.kind == CPU and item.tag == PYTHON and timeline.stacks)):
            between[thread].append(i)
        elif (item.kind == LAUNCH and item.ops and all(timeline.ops[j].kind == "k" for j in item.ops)
              and not consumed.get(thread)):
            consumed[thread], own_sync[thread] = True, False
            for k in between[thread]:
                if timeline.items[k].kind == SYNC:
                    plan.cost[k], plan.blocks[k] = 0.0, False
            between[thread] = []
        elif not (item.kind == CPU and item.tag in (PYTHON, USER)):
            del head[thread]
    return changed


def _walk_sync(timeline: Timeline, plan: Plan) -> int:
    changed = 0
    for i, item in enumerate(timeline.items):
        if item.agent:
            continue
        if (item.kind == SYNC or (item.kind == BLOCKING_COPY and _copies(timeline, item, "DtoH"))) \
                and plan.blocks[i]:
            plan.blocks[i] = False
            plan.cost[i] = min(item.dur, item.post) if item.waited else item.dur
            changed += 1
    return changed


WALKS = {"launch": lambda t, p: _walk_collapse(t, p, False)[0], "optimizer": lambda t, p: _walk_collapse(t, p, True)[0],
         "small_copies": _walk_small_copies, "sync": _walk_sync}


@pytest.mark.parametrize("window", ["item_sync", "pageable_copies", "tiny_kernels", "loader_overlap"])
def test_the_edits_change_the_plan_as_a_walk_over_every_item_did(window: str) -> None:
    timeline = build(read_trace(WINDOWS / f"{window}.trace.json.gz"))
    assert timeline is not None
    for before in ([], ["pinned"], ["small_copies"], ["launch"]):  # alone, and after another edit (the pairs)
        for name, walk in WALKS.items():
            ours, theirs = Plan.measured(timeline, 0.5), Plan.measured(timeline, 0.5)
            for other in before:
                EDITS[other](timeline, ours)
                EDITS[other](timeline, theirs)
            changed, _ = EDITS[name](timeline, ours)
            assert changed == walk(timeline, theirs), (window, before, name)
            assert ours == theirs, (window, before, name)
