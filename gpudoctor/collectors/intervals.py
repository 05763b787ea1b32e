"""Whole-array sweeps over the intervals of a profiler trace (numpy), with the results of the
sequential loops they replace, to the last bit.

Nesting. The intervals of each thread, sorted by (start, -end) (file order on ties), are
walked with a stack: before an interval is pushed, the stack's top is popped while it ended
before the new start (`touching` intervals, whose end equals the new start, are popped too
when asked). The entry left below the new interval is its *parent*. Whatever the nesting,
proper or not, the parent of i is the last j < i of its thread still open at i's start
(``end_j >= start_i``, or ``> start_i`` with `touching`): an entry above that j ended before
the start (so it was popped) and j itself cannot have been popped by an earlier push, whose
start was no later. So the parent is found for all intervals at once by pointer jumping:
every interval between the parent candidate and i ended before i's start, and jumping to
the candidate's own candidate keeps that true because starts only grow.

Sums. ``np.sum`` adds pairwise and differs from a Python loop in the last bits; here every
float sum runs in the loop's order: ``np.bincount(weights=...)`` and ``np.cumsum`` add one
value after the other, in array order.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

Thread = tuple[Any, Any]


def codes(keys: Iterable[Hashable]) -> tuple[np.ndarray, list[Any]]:
    """An int code per key (0, 1, ... in order of first appearance) and the distinct keys."""
    keys = keys if isinstance(keys, list) else list(keys)
    distinct = list(dict.fromkeys(keys))
    if len(distinct) <= 1:
        return np.zeros(len(keys), dtype=np.int64), distinct
    lookup = {key: code for code, key in enumerate(distinct)}
    return np.fromiter(map(lookup.__getitem__, keys), dtype=np.int64, count=len(keys)), distinct


def first_appearance(values: np.ndarray) -> np.ndarray:
    """The distinct values of an array of codes (ints >= 0) in order of first appearance."""
    if not len(values):
        return values
    first = np.full(int(values.max()) + 1, len(values), dtype=np.int64)
    np.minimum.at(first, values, np.arange(len(values)))
    seen = np.flatnonzero(first < len(values))
    return seen[np.argsort(first[seen], kind="stable")]


def coded_ints(values: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """codes(values) of an array of ints >= 0 (small: codes into a table): their codes, and
    the distinct values in order of first appearance."""
    if not len(values):
        return np.zeros(0, dtype=np.int64), []
    order = first_appearance(values)
    renumber = np.zeros(int(values.max()) + 1, dtype=np.int64)
    renumber[order] = np.arange(len(order))
    return renumber[values], order.tolist()


def pair_codes(firsts: list[Any], seconds: list[Any]) -> tuple[np.ndarray, list[tuple[Any, Any]]]:
    """codes(zip(firsts, seconds)), quicker for numbers (process and thread ids): only where
    the pair changes from one position to the next is a tuple made."""
    count = len(firsts)
    try:
        if len(set(firsts)) == 1:  # one process: its threads' ids tell them apart
            second_codes, distinct = codes(seconds)
            return second_codes, [(firsts[0], second) for second in distinct]
        if len(set(seconds)) == 1:
            first_codes, distinct = codes(firsts)
            return first_codes, [(first, seconds[0]) for first in distinct]
    except TypeError:  # an unhashable id: then so is the pair, as in a dict
        pass
    try:
        a = np.fromiter(firsts, dtype=np.float64, count=count)
        b = np.fromiter(seconds, dtype=np.float64, count=count)
    except (TypeError, ValueError, OverflowError):
        return codes(zip(firsts, seconds))
    if count == 0 or not (np.isfinite(a).all() and np.isfinite(b).all()) \
            or max(np.abs(a).max(), np.abs(b).max()) >= 2.0 ** 53:
        return codes(zip(firsts, seconds))  # floats would merge distinct ids
    runs = np.flatnonzero(np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])])
    if len(runs) * 4 > count:
        return codes(zip(firsts, seconds))
    starts = runs.tolist()
    run_codes, distinct = codes([(firsts[i], seconds[i]) for i in starts])
    return np.repeat(run_codes, np.diff(np.r_[runs, count])), distinct


def floats(values: Sequence[float]) -> np.ndarray:
    return np.fromiter(values, dtype=np.float64, count=len(values))


def sequential_sum(values: np.ndarray) -> float:
    """0.0 + v0 + v1 + ... in array order (what a Python loop of ``total += v`` gives)."""
    if not len(values):
        return 0.0
    return float(np.cumsum(np.concatenate((np.zeros(1), values)))[-1])


def grouped_sums(keys: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Per key 0..groups-1: 0.0 + its values in array order."""
    return np.bincount(keys, weights=values, minlength=groups) if len(keys) else np.zeros(groups)


def grouped_max(keys: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Per key: max(0.0, its values) (the running max of a tally that starts at 0.0)."""
    peak = np.zeros(groups)
    if len(keys):
        np.maximum.at(peak, keys, values)
    return peak


def tally(keys: np.ndarray, values: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, total, max) per key, the total added in array order (trace._tally's numbers)."""
    counts = np.bincount(keys, minlength=groups) if len(keys) else np.zeros(groups, dtype=np.int64)
    return counts, grouped_sums(keys, values, groups), grouped_max(keys, values, groups)


def distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values) of a 1-D integer array, sorted. Without numpy's own: since numpy 2.3 its
    first plain call imports numpy.ma (tens of milliseconds, in each process that asks)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    chosen: np.ndarray = ordered[keep]
    return chosen


def range_min(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """min(values[low[i]:high[i]]) for each i, inf for an empty range (a sparse table: the
    minimum of two overlapping power-of-two windows)."""
    result = np.full(len(low), np.inf)
    length = high - low
    some = length > 0
    if not some.any():
        return result
    level = np.zeros(len(low), dtype=np.int64)
    level[some] = np.frexp(length[some].astype(np.float64))[1] - 1  # floor(log2(length))
    table = [values]
    for step in range(1, int(level.max()) + 1):
        half = 1 << (step - 1)
        table.append(np.minimum(table[-1][:-half], table[-1][half:]))
    for step in distinct(level[some]).tolist():
        chosen = some & (level == step)
        width = 1 << step
        result[chosen] = np.minimum(table[step][low[chosen]], table[step][high[chosen] - width])
    return result


def blocks(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of intervals already sorted by start: (block starts, block ends, index of
    the interval opening each block). A block grows while the next start is at most its end."""
    if not len(starts):
        empty = np.zeros(0)
        return empty, empty, np.zeros(0, dtype=np.int64)
    reach = np.maximum.accumulate(ends)
    opening = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])
    closing = np.r_[opening[1:] - 1, len(starts) - 1]
    return starts[opening], reach[closing], opening


def _by_thread_start_end(thread_codes: np.ndarray, threads: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The stable order by (thread, start, -end). Each thread's events are often written in
    that order already (Python frames are): then grouping the threads is enough."""
    grouped = np.argsort(thread_codes.astype(np.int16) if threads < 2 ** 15 else thread_codes, kind="stable")
    if len(grouped) > 1:
        s, e, t = starts[grouped], ends[grouped], thread_codes[grouped]
        ordered = (s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (e[1:] <= e[:-1])) | (t[1:] != t[:-1])
        if not ordered.all():
            return np.lexsort((-ends, starts, thread_codes))  # lexsort is stable
    return grouped


class Nested:
    """Intervals of several threads: each thread's run sorted by (start, -end), file order on
    ties; runs in the order of the threads' codes."""

    def __init__(self, thread_codes: np.ndarray, threads: list[Any], starts: np.ndarray, ends: np.ndarray) -> None:
        self.threads = threads
        self.order = _by_thread_start_end(thread_codes, len(threads), starts, ends)
        self.start = starts[self.order]
        self.end = ends[self.order]
        self.bounds = np.searchsorted(thread_codes[self.order], np.arange(len(threads) + 1))
        self.run_start = np.repeat(self.bounds[:-1], np.diff(self.bounds))  # first index of each one's run
        self.run_end = np.repeat(self.bounds[1:], np.diff(self.bounds))

    def __len__(self) -> int:
        return len(self.start)

    def parents(self, touching: bool) -> np.ndarray:
        """The stack entry below each interval when it is pushed (-1: none); `touching`: an
        entry that ended exactly at the new start is popped."""
        index = np.arange(len(self))
        if not len(self):
            return index
        # the first candidate: the last interval still open when the next one started (one
        # with a child). Those after it were closed before their next started, so before
        # this start too: a run of siblings is passed over in one step.
        has_child = np.zeros(len(self), dtype=bool)
        has_child[:-1] = (self.end[:-1] > self.start[1:]) if touching else (self.end[:-1] >= self.start[1:])
        has_child[self.run_end - 1 == index] = False
        parent = np.r_[-1, np.maximum.accumulate(np.where(has_child, index, -1))[:-1]]
        parent[parent < self.run_start] = -1

        def closed(candidates: np.ndarray, at: np.ndarray) -> np.ndarray:
            ends = self.end[np.maximum(candidates, 0)]
            mask: np.ndarray = (candidates >= 0) & ((ends <= at) if touching else (ends < at))
            return mask

        todo = np.flatnonzero(closed(parent, self.start))
        while len(todo):
            parent[todo] = parent[parent[todo]]
            todo = todo[closed(parent[todo], self.start[todo])]
        found: np.ndarray = parent
        return found

    def pop_order(self, parent: np.ndarray) -> np.ndarray:
        """Indices in the order the stack pops them (a post-order: the nested first)."""
        index = np.arange(len(self))
        popped_at = index + 1  # the first later push that pops it, or the run's end

        def inside(candidates: np.ndarray, owners: np.ndarray) -> np.ndarray:
            within = candidates < self.run_end[owners]
            mask: np.ndarray = within & (parent[np.minimum(candidates, len(self) - 1)] >= owners)
            return mask

        todo = np.flatnonzero(inside(popped_at, index)) if len(self) else index
        while len(todo):
            popped_at[todo] = popped_at[popped_at[todo]]
            todo = todo[inside(popped_at[todo], todo)]
        return np.lexsort((-index, popped_at))

    def self_times(self) -> tuple[np.ndarray, np.ndarray]:
        """(own time of each interval: its duration less its children's, at least 0; the pop
        order) as trace's operator stack computes them."""
        parent = self.parents(touching=True)
        durations = self.end - self.start
        nested = parent >= 0
        children = grouped_sums(parent[nested], durations[nested], len(self))
        own = durations - children
        return np.where(own > 0.0, own, 0.0), self.pop_order(parent)

    def outermost(self) -> np.ndarray:
        """Mask of the intervals not nested in an earlier one of their thread (starting at or
        after the latest end so far)."""
        if not len(self):
            return np.zeros(0, dtype=bool)
        previous = np.full(len(self), -np.inf)
        for low, high in zip(self.bounds[:-1].tolist(), self.bounds[1:].tolist()):
            if high > low + 1:
                previous[low + 1:high] = np.maximum.accumulate(self.end[low:high - 1])
        mask: np.ndarray = self.start >= previous
        return mask

    def tops(self, thread: int, times: np.ndarray, parent: np.ndarray) -> np.ndarray:
        """For times on one thread: the innermost entry of the stack (`parent` of
        ``parents(touching=False)``) once every interval starting at or before the time is
        pushed and the ended ones popped from the top; -1 when the stack is empty."""
        low, high = self.bounds[thread], self.bounds[thread + 1]
        top = low + np.searchsorted(self.start[low:high], times, side="right") - 1
        top[top < low] = -1
        todo = np.flatnonzero((top >= 0) & (self.end[np.maximum(top, 0)] < times))
        while len(todo):
            top[todo] = parent[top[todo]]
            todo = todo[(top[todo] >= 0) & (self.end[np.maximum(top[todo], 0)] < times[todo])]
        found: np.ndarray = top
        return found
