"""trace_syncs names and places each synchronisation as the walk over the intervals around it
did (trace._enclosing over the operators and frames of its thread), on random traces: ties,
touching and improperly nested intervals, gpudoctor's own frames and several threads."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.collectors.trace import _enclosing, _site
from gpudoctor.collectors.trace_columns import TraceColumns
from gpudoctor.collectors.trace_decode import index_events
from gpudoctor.collectors.trace_syncs import AGENT_WINDOW_FRAME, workload_syncs

FRAMES = ["train.py(12): step", "train.py(30): main", "torch/nn/modules/module.py(1): _call_impl",
          "<built-in method item of Tensor object>", f"{AGENT_WINDOW_FRAME}.py(40): stop", "util.py(3): helper"]
OPERATORS = ["aten::item", "aten::_local_scalar_dense", "aten::to", "autograd::engine", "MyOp"]
APIS = ["cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaStreamSynchronize_v3020"]

times = st.integers(min_value=0, max_value=40).map(lambda v: v / 2)
interval = st.tuples(st.sampled_from([1, 2]), times, st.integers(min_value=0, max_value=12).map(lambda v: v / 2))
events_st = st.tuples(
    st.lists(st.tuples(interval, st.sampled_from(OPERATORS)), max_size=25),
    st.lists(st.tuples(interval, st.sampled_from(FRAMES)), max_size=25),
    st.lists(st.tuples(interval, st.sampled_from(APIS)), min_size=1, max_size=25),
)


def _trace(operators: list, frames: list, calls: list) -> dict[str, Any]:
    def event(cat: str, name: str, row: tuple) -> dict[str, Any]:
        tid, ts, dur = row
        return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}

    return {"traceEvents": [event("cpu_op", n, r) for r, n in operators]
            + [event("python_function", n, r) for r, n in frames]
            + [event("cuda_runtime", n, r) for r, n in calls]}


def _walked(columns: TraceColumns) -> tuple[list[float], list[float], dict]:
    """The syncs as trace.py counted them before: (starts, durations, sites)."""
    api = columns.index.api
    syncs = [((api.value("pid", p), api.value("tid", p)), float(api.ts[p]), float(api.dur[p]),
              columns.api_kind(p).api) for p in columns.syncs]
    around: dict[Any, list] = defaultdict(list)
    for thread in {s[0] for s in syncs}:
        at = [ts for th, ts, _, _ in syncs if th == thread]
        for events, frame in ((columns.operators, False), (columns.frames, True)):
            for i in events.on(thread).tolist():
                if any(events.start[i] <= t <= events.end[i] for t in at):
                    around[thread].append((float(events.start[i]), float(events.end[i]), frame, events.names[i]))
    by_thread: dict[Any, list] = defaultdict(list)
    for thread, ts, dur, name in syncs:
        by_thread[thread].append((ts, dur, name))
    starts, durations, sites = [], [], {}
    for thread, mine in by_thread.items():
        mine.sort()
        for (ts, dur, name), enclosing in zip(mine, _enclosing(around.get(thread, []), [s[0] for s in mine])):
            frames = [i[3] for i in enclosing if i[2]]
            if any(AGENT_WINDOW_FRAME in f for f in frames):
                continue
            label = next((i[3] for i in enclosing if not i[2] and i[3].startswith("aten::")), name)
            stat = sites.setdefault((label, _site(frames)), [0, 0.0])
            stat[0] += 1
            stat[1] += dur
            starts.append(ts)
            durations.append(dur)
    return starts, durations, sites


@settings(max_examples=300, deadline=None)
@given(events_st)
def test_syncs_are_named_and_placed_as_the_walk_did(events):
    columns = TraceColumns(index_events(_trace(*events)))
    syncs = workload_syncs(columns, _site)
    starts, durations, sites = _walked(columns)
    assert syncs.start.tolist() == starts
    assert syncs.dur == durations
    assert list(syncs.sites.items()) == list(sites.items())
