"""The Python frame stacks of a trace's threads, asked at many times at once.

torch.profiler records each Python function as a ``python_function`` range. The frames
open at a time on a thread are its stack then: each frame's parent is the frame below it
when it was pushed (intervals.Nested.parents), so a stack is the chain of parents of its
innermost open frame (Nested.tops), and equal chains of names get one id (a trie of
(parent's stack, name)): what a stack says (its call site, whether it is gpudoctor's own)
is worked out once per distinct stack, not once per query. A stack that still holds a
frame ended before the time (frames not properly nested) is filtered frame by frame.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np

from gpudoctor.collectors.trace_columns import HostEvents


class FrameStacks:
    """The frame stacks of a trace: each frame's parent on its thread's stack, the id of the
    stack it tops (equal ids: equal names, outermost first) and the earliest end in it."""

    def __init__(self, frames: HostEvents) -> None:
        self.frames = frames
        nest = frames.nested
        self.parent = nest.parents(touching=False)
        count = len(nest)
        name_codes = frames.name_codes[nest.order]
        depth = (self.parent >= 0).astype(np.int64)
        above = self.parent.copy()
        todo = np.flatnonzero(above >= 0)
        while len(todo):  # pointer jumping: depth = hops to the root
            up = above[todo]
            depth[todo] += depth[up]
            above[todo] = above[up]
            todo = todo[above[todo] >= 0]
        self.node = np.zeros(count, dtype=np.int64)
        self.min_end = nest.end.copy()
        node_parents, node_names = [], []
        by_depth = np.argsort(depth.astype(np.int16) if count and depth.max() < 2 ** 15 else depth, kind="stable")
        levels = np.searchsorted(depth[by_depth], np.arange(int(depth.max(initial=0)) + 2)).tolist()
        width, made = max(len(frames.distinct_names), 1), 0
        for low, high in pairwise(levels):
            level = by_depth[low:high]
            parent = self.parent[level]
            above_node = np.where(parent >= 0, self.node[np.maximum(parent, 0)], -1)
            distinct_keys, inverse = _distinct((above_node + 1) * width + name_codes[level])
            self.node[level] = made + inverse
            made += len(distinct_keys)
            node_parents.append(distinct_keys // width - 1)
            node_names.append(distinct_keys % width)
            nested = parent >= 0
            self.min_end[level[nested]] = np.minimum(self.min_end[level[nested]], self.min_end[parent[nested]])
        self.node_parent: list[int] = np.concatenate(node_parents).tolist() if node_parents else []
        self.node_name: list[int] = np.concatenate(node_names).tolist() if node_names else []
        self._names: dict[int, tuple[str, ...]] = {}

    def thread_code(self, thread: Any) -> int | None:
        try:
            return self.frames.threads.index(thread)
        except ValueError:
            return None

    def names(self, node: int) -> tuple[str, ...]:
        """The frames of a stack id, outermost first (a loop, not recursion: a stack may be
        thousands of frames deep)."""
        missing = []
        while node >= 0 and node not in self._names:
            missing.append(node)
            node = self.node_parent[node]
        known = self._names[node] if node >= 0 else ()
        for below in reversed(missing):
            known = self._names[below] = (*known, self.frames.distinct_names[self.node_name[below]])
        return known

    def open_names(self, top: int, time: float) -> tuple[str, ...]:
        """The frames of the stack under `top` still open at `time`, outermost first."""
        nest, names = self.frames.nested, []
        while top >= 0:
            if nest.end[top] >= time:
                names.append(self.frames.names[int(nest.order[top])])
            top = int(self.parent[top])
        return tuple(reversed(names))


    def at(self, thread: Any, times: np.ndarray) -> tuple[np.ndarray, list[tuple[str, ...]]]:
        """The frames open at each time on one thread, outermost first: a code per time into
        the list of the distinct stacks (the empty stack among them when no frame is open)."""
        codes = np.zeros(len(times), dtype=np.int64)
        stacks: dict[tuple[str, ...], int] = {}
        frame_thread = self.thread_code(thread)
        if frame_thread is None or not len(times):
            return codes, [()] if len(times) else []
        tops = self.frames.nested.tops(frame_thread, times, self.parent)
        safe = np.maximum(tops, 0)
        whole = (tops >= 0) & (self.min_end[safe] >= times)
        codes[tops < 0] = stacks.setdefault((), len(stacks)) if (tops < 0).any() else 0
        if whole.any():
            nodes, inverse = _distinct(self.node[tops[whole]])  # node ids >= 0
            node_codes = [stacks.setdefault(self.names(node), len(stacks)) for node in nodes.tolist()]
            codes[whole] = np.array(node_codes, dtype=np.int64)[inverse.reshape(-1)]
        for i in np.flatnonzero((tops >= 0) & ~whole).tolist():
            codes[i] = stacks.setdefault(self.open_names(int(tops[i]), float(times[i])), len(stacks))
        return codes, list(stacks)


def _distinct(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, return_inverse=True) of ints >= 0; by a table when their range is small."""
    top = int(keys.max()) + 1 if len(keys) else 0
    if top > 4 * len(keys) + 1024:
        distinct, inverse = np.unique(keys, return_inverse=True)
        return distinct, inverse.reshape(-1)
    present = np.zeros(top, dtype=bool)
    present[keys] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present), rank[keys]
