"""The fields of a TraceIndex that the statistics (trace.py) and the hotspots (hotspots.py)
read, taken out of the events once as columns (numpy arrays, or lists for values of any
type), with what both derive from them: which CUDA call queued each GPU event, and the
operators' own (self) time.

A correlation id names the call that queued a GPU event when a launch, graph launch, copy
or memset call carries it (the last such call when ids repeat).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from itertools import compress
from typing import TYPE_CHECKING, Any

import numpy as np

from gpudoctor.collectors.intervals import Nested, coded_ints, codes, tally
from gpudoctor.collectors.kineto_names import (
    _VERSION_SUFFIX,
    GRAPH_LAUNCH_APIS,
    KERNEL_LAUNCH_APIS,
    STEP_PREFIX,
    SYNC_APIS,
)
from gpudoctor.collectors.trace_decode import NO_ID, OP, EventColumns, Ids, TraceIndex, id_at, id_list, id_rows

if TYPE_CHECKING:
    from gpudoctor.collectors.stacks import FrameStacks


class ApiKind:
    """What a CUDA call's name says about it."""

    def __init__(self, name: str) -> None:
        self.api = _VERSION_SUFFIX.sub("", name)
        self.launch = self.api in KERNEL_LAUNCH_APIS or self.api in GRAPH_LAUNCH_APIS
        self.kernel_launch = self.api in KERNEL_LAUNCH_APIS
        self.tracked = self.launch or "Memcpy" in self.api or "Memset" in self.api  # queues GPU work
        self.sync = self.api in SYNC_APIS


class HostEvents:
    """Host events of one list (operators or Python frames) as columns, file order."""

    def __init__(self, events: EventColumns, kind: int | None = None) -> None:
        """`kind`: only the events of that kind (Event.kind)."""
        self.events = events
        start = events.ts
        end = start + events.dur
        self.all_name_codes, self.distinct_names = coded(events, "name")  # distinct_names: of all the events
        self.start, self.end, self.name_codes = start, end, self.all_name_codes
        self.kept: list[bool] | None = None
        thread_codes, threads = coded_threads(events)
        if kind is not None:
            keep = events.kind == kind
            if not keep.all():
                self.start, self.end, self.name_codes = start[keep], end[keep], self.all_name_codes[keep]
                kept_codes, order = coded_ints(thread_codes[keep])  # the threads these events are on, as met
                self.thread_codes, self.threads = kept_codes, [threads[i] for i in order]
                self.kept = keep.tolist()
                return
        self.thread_codes, self.threads = thread_codes, threads

    @functools.cached_property
    def all_names(self) -> list[str]:
        return self.events.names

    @functools.cached_property
    def names(self) -> list[str]:
        return self.all_names if self.kept is None else list(compress(self.all_names, self.kept))

    @functools.cached_property
    def nested(self) -> Nested:
        return Nested(self.thread_codes, self.threads, self.start, self.end)

    def on(self, thread: Any) -> np.ndarray:
        """Positions (file order) of the events of one thread."""
        try:
            code = self.threads.index(thread)
        except ValueError:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.thread_codes == code) if len(self.threads) > 1 else np.arange(len(self.start))

    def named(self, test: Callable[[str], bool]) -> np.ndarray:
        """Mask of the events whose name passes `test`."""
        chosen = np.array([test(name) for name in self.distinct_names], dtype=bool)
        return chosen[self.name_codes] if len(self.name_codes) else np.zeros(0, dtype=bool)


def str_codes(values: list[Any]) -> tuple[np.ndarray, list[str]]:
    """codes([str(v) for v in values]), quicker when the values are of one type with one
    spelling per value (ints or strings: equal ones are spelled alike)."""
    types = set(map(type, values))
    if len(types) == 1 and types <= {int, str}:
        raw_codes, distinct = codes(values)
        label_codes, labels = codes([str(v) for v in distinct])
        return (label_codes[raw_codes] if len(raw_codes) else raw_codes), labels
    return codes([str(v) for v in values])


class TraceColumns:
    """The columns of one TraceIndex."""

    def __init__(self, index: TraceIndex) -> None:
        self.index = index
        gpu = index.gpu
        self.gpu_kind = gpu.kind.astype(np.int64)
        self.gpu_start = gpu.ts
        self.gpu_dur = gpu.dur
        self.gpu_end = self.gpu_start + self.gpu_dur
        self.gpu_correlation = gpu.correlation
        self.gpu_external_id = gpu.external_id

        api = index.api
        count = len(api)
        self.api_start = api.ts
        self.api_dur = api.dur
        self.api_name_codes, distinct = coded(api, "name")
        self.api_kinds = [ApiKind(name) for name in distinct]
        tracked = np.array([k.tracked for k in self.api_kinds], dtype=bool)
        queued = np.flatnonzero(tracked[self.api_name_codes]).tolist() if count else []
        correlation = api.correlation
        callers = correlation if len(queued) == count else id_rows(correlation, np.array(queued, dtype=np.int64))
        # the calls that queued GPU work, one per correlation id (the last call) in the order
        # the ids first appear (a dict's order); each GPU event's entry among them, or -1
        self.launch_calls, self.gpu_caller = _match(callers, np.array(queued, dtype=np.int64), self.gpu_correlation)
        self.gpu_launch = np.where(self.gpu_caller >= 0, self.launch_calls[np.maximum(self.gpu_caller, 0)], -1) \
            if len(self.launch_calls) else np.full(len(gpu), -1, dtype=np.int64)

    @functools.cached_property
    def gpu_names(self) -> list[str]:
        return self.index.gpu.names

    @functools.cached_property
    def api_threads(self) -> tuple[np.ndarray, list[tuple[Any, Any]]]:
        return coded_threads(self.index.api)

    def api_kind(self, position: int) -> ApiKind:
        return self.api_kinds[int(self.api_name_codes[position])]

    @functools.cached_property
    def syncs(self) -> list[int]:
        """Positions in index.api of the synchronising calls."""
        if not len(self.api_name_codes):
            return []
        sync = np.array([k.sync for k in self.api_kinds], dtype=bool)
        positions: list[int] = np.flatnonzero(sync[self.api_name_codes]).tolist()
        return positions

    @functools.cached_property
    def operators(self) -> HostEvents:
        """index.ops less the record_function ranges."""
        return HostEvents(self.index.ops, OP)

    @functools.cached_property
    def frames(self) -> HostEvents:
        return HostEvents(self.index.frames)

    @functools.cached_property
    def frame_stacks(self) -> FrameStacks | None:
        """The Python frame stacks (None: no frame recorded)."""
        from gpudoctor.collectors.stacks import FrameStacks

        return FrameStacks(self.frames) if len(self.frames.start) else None

    @functools.cached_property
    def step_names(self) -> set[str]:
        """The ``ProfilerStep#N`` ranges' names."""
        return {name for name in self.operators.distinct_names if name.startswith(STEP_PREFIX)}

    @functools.cached_property
    def gpu_operators(self) -> tuple[np.ndarray, list[Any], list[str]]:
        """The operator each GPU event's work is attributed to: the one its External id names,
        else the one of the call that queued it (an op or range of index.ops, the last of an
        id; ProfilerStep ranges are none). (Per GPU event a code or -1, the External id of each
        code in the order they first appear, its operator's name.)"""
        operators = self.operators
        external = self.index.ops.external_id
        named = operators.all_name_codes
        steps = self.step_names
        if steps:
            is_step = np.array([name in steps for name in operators.distinct_names], dtype=bool)
            keep = ~is_step[named]
            external = id_rows(external, keep)
            named = named[keep]
        from_gpu = self.gpu_external_id
        numeric = _int_array(external)
        gpu_ids = _int_array(from_gpu) if numeric is not None else None
        if numeric is not None and gpu_ids is not None:
            present = numeric[1]
            ids, names = numeric[0][present], named[present]
            distinct, first = np.unique(ids[::-1], return_index=True)  # the last of each id
            name_of = names[::-1][first]
            found = _lookup(distinct, gpu_ids[0], gpu_ids[1])
            missing = np.flatnonzero(found < 0)
            if len(missing):
                fallback_ids = _int_array(_launch_ids(self.index.api.external_id, self.gpu_launch[missing]))
                if fallback_ids is None:
                    return self._gpu_operators_by_dict(external, named)
                found[missing] = _lookup(distinct, fallback_ids[0], fallback_ids[1])
            hit = found >= 0
            codes_in_order, order = coded_ints(found[hit])
            code = np.full(len(found), -1, dtype=np.int64)
            code[hit] = codes_in_order
            return (code, distinct[np.array(order, dtype=np.int64)].tolist(),
                    [operators.distinct_names[i] for i in name_of[order].tolist()])
        return self._gpu_operators_by_dict(external, named)

    def _gpu_operators_by_dict(self, external: Ids, named: np.ndarray) -> tuple[np.ndarray, list[Any], list[str]]:
        distinct_names = self.operators.distinct_names
        table = dict(zip(id_list(external), named.tolist()))
        table.pop(None, None)
        api_external = self.index.api.external_id
        attributed = [ext_id if ext_id in table else None for ext_id in id_list(self.gpu_external_id)]
        for i in [i for i, ext_id in enumerate(attributed) if ext_id is None]:
            launch = int(self.gpu_launch[i])
            ext_id = id_at(api_external, launch) if launch >= 0 else None
            attributed[i] = ext_id if ext_id in table else None
        kept = [i for i, ext_id in enumerate(attributed) if ext_id is not None]
        code = np.full(len(attributed), -1, dtype=np.int64)
        if not kept:
            return code, [], []
        ext_codes, ext_ids = codes([attributed[i] for i in kept])
        code[kept] = ext_codes
        return code, ext_ids, [distinct_names[table[x]] for x in ext_ids]

    @functools.cached_property
    def own_times(self) -> list[tuple[str, list[float]]]:
        """(operator, [count, total, max]) of the operators' own time, each thread's stack
        popped in turn, totals added in the order the stack pops (trace._tally's rows)."""
        operators = self.operators
        if not len(operators.start):
            return []
        nest = operators.nested
        own, popped = nest.self_times()
        counts, totals, peaks = tally(operators.name_codes[nest.order[popped]], own[popped],
                                      len(operators.distinct_names))
        return [(name, [count, total, peak]) for name, count, total, peak
                in zip(operators.distinct_names, counts.tolist(), totals.tolist(), peaks.tolist()) if count]

def coded(events: EventColumns, field: str, rows: np.ndarray | None = None) -> tuple[np.ndarray, list[Any]]:
    """codes(events.values(field)) (of the events at `rows` only, when given) from the
    field's codes: no value list made."""
    column = getattr(events, field)
    if rows is not None:
        column = column[rows]
    if not len(column):
        return np.zeros(0, dtype=np.int64), []
    column_codes, order = coded_ints(column)
    values = events.tables[field].distinct
    return column_codes, [values[i] for i in order]


def coded_threads(events: EventColumns) -> tuple[np.ndarray, list[tuple[Any, Any]]]:
    """pair_codes(events.pids, events.tids), from their codes."""
    if not len(events):
        return np.zeros(0, dtype=np.int64), []
    width = int(events.tid.max()) + 1
    pair_codes, pairs = coded_ints(events.pid.astype(np.int64) * width + events.tid)
    pids, tids = events.tables["pid"].distinct, events.tables["tid"].distinct
    return pair_codes, [(pids[pair // width], tids[pair % width]) for pair in pairs]


def _match(keys: Ids, positions: np.ndarray, lookups: Ids) -> tuple[np.ndarray, np.ndarray]:
    """dict(zip(keys, positions)) without the None keys, as (its values in its order, the
    entry of each lookup or -1; None finds nothing); with numpy when all are ints."""
    numeric = _int_array(keys)
    found = _int_array(lookups) if numeric is not None else None
    if numeric is not None and found is not None:
        ids, present = numeric
        ids, positions = ids[present], positions[present]
        if not len(ids):
            return positions, np.full(len(lookups), -1, dtype=np.int64)
        distinct, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        last = np.zeros(len(distinct), dtype=np.int64)
        np.maximum.at(last, inverse.reshape(-1), np.arange(len(ids)))
        by_first = np.argsort(first, kind="stable")
        rank = np.empty(len(distinct), dtype=np.int64)
        rank[by_first] = np.arange(len(distinct))
        at = _lookup(distinct, found[0], found[1])
        return positions[last][by_first], np.where(at >= 0, rank[np.maximum(at, 0)], -1)
    table = {key: position for key, position in zip(id_list(keys), positions.tolist()) if key is not None}
    entry = {key: i for i, key in enumerate(table)}
    return (np.array(list(table.values()), dtype=np.int64),
            np.fromiter([entry.get(v, -1) if v is not None else -1 for v in id_list(lookups)], dtype=np.int64,
                        count=len(lookups)))


def _launch_ids(column: Ids, launches: np.ndarray) -> Ids:
    """The Ids of the calls at `launches` (-1: none, an absent id)."""
    if isinstance(column, np.ndarray):
        return np.where(launches >= 0, column[np.maximum(launches, 0)], NO_ID) if len(column) \
            else np.full(len(launches), NO_ID, dtype=np.int64)
    return [column[i] if i >= 0 else None for i in launches.tolist()]


def _int_array(values: Ids) -> tuple[np.ndarray, np.ndarray] | None:
    """(the values as int64, mask of those not None), or None when a value is no plain int (a
    float, a bool, a string: the dict path keeps Python's equality for them)."""
    if isinstance(values, np.ndarray):
        return values, values != NO_ID
    types = set(map(type, values))
    try:
        if types == {int}:
            return np.fromiter(values, dtype=np.int64, count=len(values)), np.ones(len(values), dtype=bool)
        if types - {int, type(None)}:
            return None
        return (np.array([-1 if v is None else v for v in values], dtype=np.int64),
                np.array([v is not None for v in values], dtype=bool))
    except OverflowError:
        return None


def _lookup(sorted_keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The index of each wanted value in sorted_keys, -1 when absent."""
    if not len(sorted_keys):
        return np.full(len(values), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return np.where(wanted & (sorted_keys[at] == values), at, -1)
