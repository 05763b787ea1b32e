"""The fields of a TraceIndex that the statistics (trace.py) and the hotspots (hotspots.py)
read, taken out of the events once as columns (numpy arrays, or lists for values of any
type), with what both derive from them: which CUDA call queued each GPU event, and the
operators' own (self) time.

A correlation id names the call that queued a GPU event when a launch, graph launch, copy
or memset call carries it (the last such call when ids repeat).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from gpudoctor.collectors.intervals import Nested, codes, floats, tally
from gpudoctor.collectors.kineto_names import (
    _VERSION_SUFFIX,
    GRAPH_LAUNCH_APIS,
    KERNEL_LAUNCH_APIS,
    SYNC_APIS,
)
from gpudoctor.collectors.trace_decode import OP, TraceIndex

STEP_PREFIX = "ProfilerStep#"


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

    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.start = floats([e.ts for e in events])
        self.end = self.start + floats([e.dur for e in events])
        self.names: list[str] = [e.name for e in events]
        self.thread_codes, self.threads = codes(zip([e.pid for e in events], [e.tid for e in events]))

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


class TraceColumns:
    """The columns of one TraceIndex."""

    def __init__(self, index: TraceIndex) -> None:
        self.index = index
        gpu = index.gpu
        self.gpu_kind = np.fromiter((e.kind for e in gpu), dtype=np.int64, count=len(gpu))
        self.gpu_names: list[str] = [e.name for e in gpu]  # type: ignore[misc]
        self.gpu_start = floats([e.ts for e in gpu])  # type: ignore[misc]
        self.gpu_dur = floats([e.dur for e in gpu])  # type: ignore[misc]
        self.gpu_end = self.gpu_start + self.gpu_dur
        args = [e.args for e in gpu]
        self.gpu_correlation = [a.correlation if a is not None else None for a in args]
        self.gpu_external_id = [a.external_id if a is not None else None for a in args]

        api = index.api
        self.api_start = floats([e.ts for e in api])  # type: ignore[misc]
        self.api_dur = floats([e.dur for e in api])  # type: ignore[misc]
        name_codes, distinct = codes(e.name for e in api)
        self.api_kinds = [ApiKind(name) for name in distinct]
        self.api_name_codes = name_codes
        tracked = np.array([k.tracked for k in self.api_kinds], dtype=bool)
        queued = np.flatnonzero(tracked[name_codes]) if len(api) else np.zeros(0, dtype=np.int64)
        pairs = [(a.correlation, int(i)) for i in queued.tolist()
                 if (a := api[i].args) is not None and a.correlation is not None]
        self.launch_at: dict[Any, int] = dict(pairs)  # correlation -> position in index.api (the last)
        self.gpu_launch = np.fromiter((self.launch_at.get(c, -1) if c is not None else -1
                                       for c in self.gpu_correlation), dtype=np.int64, count=len(gpu))

    def api_kind(self, position: int) -> ApiKind:
        return self.api_kinds[int(self.api_name_codes[position])]

    def api_thread(self, position: int) -> tuple[Any, Any]:
        event = self.index.api[position]
        return (event.pid, event.tid)

    @functools.cached_property
    def syncs(self) -> list[int]:
        """Positions in index.api of the synchronising calls."""
        if not len(self.api_name_codes):
            return []
        sync = np.array([k.sync for k in self.api_kinds], dtype=bool)
        return np.flatnonzero(sync[self.api_name_codes]).tolist()

    @functools.cached_property
    def operators(self) -> HostEvents:
        """index.ops less the record_function ranges."""
        return HostEvents([e for e in self.index.ops if e.kind == OP])

    @functools.cached_property
    def frames(self) -> HostEvents:
        return HostEvents(self.index.frames)

    @functools.cached_property
    def op_names(self) -> tuple[dict[Any, str], set[str]]:
        """(External id -> operator or range name, the ``ProfilerStep#N`` names) of index.ops."""
        ops = self.index.ops
        names = [e.name for e in ops]
        steps = {name for name in set(names) if name.startswith(STEP_PREFIX)}  # type: ignore[union-attr]
        external = [a.external_id if (a := e.args) is not None else None for e in ops]
        if steps:
            pairs = [(x, n) for x, n in zip(external, names) if n not in steps]
            table = dict(pairs)
        else:
            table = dict(zip(external, names))
        table.pop(None, None)
        return table, steps  # type: ignore[return-value]

    @functools.cached_property
    def own_times(self) -> list[tuple[str, list[float]]]:
        """(operator, [count, total, max]) of the operators' own time, each thread's stack
        popped in turn, totals added in the order the stack pops (trace._tally's rows)."""
        operators = self.operators
        if not len(operators.start):
            return []
        nest = operators.nested
        own, popped = nest.self_times()
        name_codes, distinct = codes(operators.names[i] for i in nest.order[popped].tolist())
        counts, totals, peaks = tally(name_codes, own[popped], len(distinct))
        return [(name, [count, total, peak]) for name, count, total, peak
                in zip(distinct, counts.tolist(), totals.tolist(), peaks.tolist())]
