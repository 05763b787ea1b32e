"""gpudoctor.collectors.intervals: known answers, and the stack loops it replaces as oracles
on random intervals (ties, touching and improperly nested ones included)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.collectors.intervals import Nested, blocks, codes, range_min, sequential_sum, tally
from gpudoctor.collectors.trace import _enclosing


def nested(rows: list[tuple[Any, float, float]]) -> Nested:
    """(thread, start, end) rows."""
    thread_codes, threads = codes(r[0] for r in rows)
    return Nested(thread_codes, threads, np.array([r[1] for r in rows], dtype=float),
                  np.array([r[2] for r in rows], dtype=float))


def loop_self_times(intervals: list[tuple[float, float, int]]) -> list[tuple[int, float]]:
    """The operator stack as trace.py walked it (one thread): (id, own time) in pop order."""
    out, stack = [], []
    for start, end, ident in sorted(intervals, key=lambda i: (i[0], -i[1])):
        while stack and stack[-1][0] <= start:
            done = stack.pop()
            out.append((done[1], max(0.0, done[2] - done[3])))
        if stack:
            stack[-1][3] += end - start
        stack.append([end, ident, end - start, 0.0])
    while stack:
        done = stack.pop()
        out.append((done[1], max(0.0, done[2] - done[3])))
    return out


def loop_enclosing(intervals: list[tuple[float, float, int]], times: list[float]) -> list[list[int]]:
    """The frame stack as the loop walks it (one thread): the ids around each time."""
    return [[i[2] for i in stack] for stack in _enclosing(intervals, times)]


def chain(parent: np.ndarray, top: int, nest: Nested, t: float) -> list[int]:
    ids = []
    while top >= 0:
        if nest.end[top] >= t:
            ids.append(int(nest.order[top]))
        top = int(parent[top])
    return ids[::-1]


def test_self_times_of_nested_operators():
    #  a [0, 10] holds b [1, 4] (which holds c [2, 3]) and d [5, 9]; e [10, 12] touches a
    rows = [(1, 0.0, 10.0), (1, 1.0, 4.0), (1, 2.0, 3.0), (1, 5.0, 9.0), (1, 10.0, 12.0)]
    nest = nested(rows)
    own, order = nest.self_times()
    assert own.tolist() == [3.0, 2.0, 1.0, 4.0, 2.0]
    assert nest.order[order].tolist() == [2, 1, 3, 0, 4]  # popped: c, b, d, a, e


def test_self_times_of_improperly_nested_operators_never_go_below_zero():
    # b starts inside a but outlives it; the stack still takes b's time from a
    nest = nested([(1, 0.0, 5.0), (1, 1.0, 8.0), (1, 6.0, 7.0)])
    own, order = nest.self_times()
    assert own.tolist() == [0.0, 6.0, 1.0]
    assert nest.order[order].tolist() == [2, 1, 0]


def test_threads_are_separate_stacks():
    nest = nested([(1, 0.0, 10.0), (2, 1.0, 2.0), (1, 1.0, 2.0)])
    own, _ = nest.self_times()
    assert dict(zip(nest.order.tolist(), own.tolist())) == {0: 9.0, 1: 1.0, 2: 1.0}
    assert nest.outermost().tolist() == [True, False, True]  # thread 1: a, b; thread 2: its own one


def test_tops_drop_frames_that_ended_and_keep_touching_ones():
    # a [0, 10], b [10, 20] touches a (stays on a's stack), c [12, 13] inside b
    nest = nested([(1, 0.0, 10.0), (1, 10.0, 20.0), (1, 12.0, 13.0)])
    parent = nest.parents(touching=False)
    assert parent.tolist() == [-1, 0, 1]
    times = np.array([-1.0, 5.0, 10.0, 12.5, 15.0, 25.0])
    tops = nest.tops(0, times, parent).tolist()
    assert tops == [-1, 0, 1, 2, 1, -1]
    # at 15 the stack holds a (ended) below b: the filter leaves b alone
    assert chain(parent, 1, nest, 15.0) == [1]


def test_blocks_merge_touching_intervals():
    starts, ends, opening = blocks(np.array([0.0, 1.0, 5.0, 6.0]), np.array([2.0, 5.0, 5.5, 7.0]))
    assert (starts.tolist(), ends.tolist(), opening.tolist()) == ([0.0, 6.0], [5.5, 7.0], [0, 3])


def test_sums_run_in_array_order():
    values = np.array([1e16, 1.0, -1e16, 1.0])
    assert sequential_sum(values) == ((0.0 + 1e16) + 1.0 - 1e16) + 1.0 == 1.0
    counts, totals, peaks = tally(np.array([1, 0, 1, 1]), values, 2)
    assert counts.tolist() == [1, 3] and totals.tolist() == [1.0, (1e16 - 1e16) + 1.0] and peaks.tolist() == [1.0, 1e16]


times_st = st.integers(min_value=0, max_value=40).map(lambda v: v / 2)
rows_st = st.lists(st.tuples(st.sampled_from(["main", "worker"]), times_st, st.integers(min_value=0, max_value=12)),
                   max_size=60)


@settings(max_examples=300, deadline=None)
@given(rows_st)
def test_self_times_and_pop_order_are_the_stack_loops(raw):
    rows = [(thread, start, start + length / 2) for thread, start, length in raw]
    nest = nested(rows)
    own, order = nest.self_times()
    expected = []
    for thread in nest.threads:
        expected += loop_self_times([(s, e, i) for i, (t, s, e) in enumerate(rows) if t == thread])
    assert [(int(nest.order[i]), float(own[i])) for i in order] == expected


@settings(max_examples=300, deadline=None)
@given(rows_st, st.lists(times_st, max_size=20))
def test_tops_and_their_filtered_chains_are_the_frame_stack(raw, times):
    rows = [(thread, start, start + length / 2) for thread, start, length in raw]
    nest = nested(rows)
    parent = nest.parents(touching=False)
    times = sorted(times)
    for code, thread in enumerate(nest.threads):
        tops = nest.tops(code, np.array(times, dtype=float), parent)
        got = [chain(parent, int(top), nest, t) for top, t in zip(tops, times)]
        intervals = [(s, e, i) for i, (th, s, e) in enumerate(rows) if th == thread]
        assert got == loop_enclosing(intervals, times)


@settings(max_examples=200, deadline=None)
@given(rows_st)
def test_outermost_is_the_reach_loop(raw):
    rows = [(thread, start, start + length / 2) for thread, start, length in raw]
    nest = nested(rows)
    mask = nest.outermost()
    got = sorted(int(i) for i in nest.order[mask])
    expected = []
    for thread in nest.threads:
        reach = float("-inf")
        mine = sorted(((s, -e, i) for i, (t, s, e) in enumerate(rows) if t == thread))
        for s, neg_end, i in mine:
            if s >= reach:
                expected.append(i)
                reach = -neg_end
            else:
                reach = max(reach, -neg_end)
    assert got == sorted(expected)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-50, max_value=50), min_size=1, max_size=40),
       st.lists(st.tuples(st.integers(min_value=0, max_value=45), st.integers(min_value=0, max_value=45)), max_size=20))
def test_range_min_is_the_min_of_each_slice(values, ranges):
    array = np.array(values, dtype=float)
    low = np.array([min(a, len(values)) for a, _ in ranges], dtype=np.int64)
    high = np.array([min(b, len(values)) for _, b in ranges], dtype=np.int64)
    got = range_min(array, low, high).tolist()
    assert got == [min(values[a:b], default=float("inf")) for a, b in zip(low.tolist(), high.tolist())]
