"""The host side of a Timeline: each thread's events, then its items in measured order.

A thread's events are taken out of the TraceIndex columns at once (`host_threads`): its CUDA
calls in time order, its operators, DataLoader waits, optimizer steps, gpudoctor's own
window-closing frames and its Python frames. `thread_items` then walks the calls: the time
between two calls is split into CPU items by what covered it (DataLoader wait, dispatch of
GPU work, the user's own Python, other Python); each call becomes a LAUNCH, SYNC or CPU
item. The covered lengths of all the gaps are found with one search per kind of span; the
few gaps that span several of them add the pieces one by one, in time order, as a walk over
the spans would: every number is the walk's, to the last bit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from gpudoctor.collectors.intervals import blocks
from gpudoctor.collectors.kineto_names import (
    _FRAME_NAME,
    DATA_ANNOTATION,
    GRAPH_LAUNCH_APIS,
    KERNEL_LAUNCH_APIS,
    OPTIMIZER_ANNOTATION,
    OPTIMIZER_UPDATE_FRAME,
    SYNC_APIS,
    frame_kind,
)
from gpudoctor.collectors.trace_decode import (
    ANNOTATION,
    API,
    FRAME,
    NO_ID,
    OP,
    EventColumns,
    TraceIndex,
    id_list,
    id_rows,
)
from gpudoctor.replay.items import CPU, DATA, DISPATCH, LAUNCH, PYTHON, SYNC, USER, GpuOp, HostColumns

AGENT_WINDOW_FRAME = "gpudoctor/agent/profiler"  # gpudoctor closing its own window
BACKWARD_FUNCTION = "autograd::engine::evaluate_function: "  # autograd's run of one backward node
MODULE_FRAME = "nn.Module: "  # torch.profiler's frame for a module's call (with_stack)
# a loss module's call (torch.nn's losses all end in "Loss": CrossEntropyLoss_0): not the model, which
# compiling the model leaves eager, as it does a loss computed by functions
LOSS_MODULE_FRAME = re.compile(r"nn\.Module: \w*Loss_\d+$")
_VERSION = re.compile(r"_v\d+$")

OVERLAP_ROUNDS = 32  # gaps covered by more spans than this add the rest one by one
Spans = tuple[np.ndarray, np.ndarray]  # sorted disjoint spans: (starts, ends)
Frames = tuple[np.ndarray, np.ndarray, np.ndarray]  # Python frames: starts, ends, the user's own?


Sequenced = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # starts, ends, numbers, backward?
_NOT_SEQUENCED: Sequenced = (np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))


@dataclass
class HostThread:
    """What one host thread recorded (times in us)."""

    first: float
    last: float
    call_ts: np.ndarray  # its CUDA calls, by (ts, dur, api, correlation)
    call_dur: np.ndarray
    call_api: list[str]  # the API's name without its version suffix
    call_correlation: list[Any]
    operators: Spans  # the outermost operator spans
    data: Spans  # DataLoader waits
    optimizer: Spans  # optimizer.step() ranges
    agent: Spans  # gpudoctor's own frames closing the window
    update: Spans  # torch.optim's update functions inside step() (OPTIMIZER_UPDATE_FRAME)
    frames: Frames  # its Python frames in file order
    modules: Spans  # its outermost nn.Module calls (the module frames, nested ones merged into them)
    annotations: int  # record_function ranges (DataLoader, optimizer, ProfilerStep)
    # its operators that carry an autograd sequence number: start, end, the number, a backward function?
    sequenced: Sequenced
    # the backward functions (autograd's evaluate_function) of operators the script ran outside the
    # model's calls, where the trace's stacks show those calls: a loss computed after the forward
    outside_backward: Spans = (np.zeros(0), np.zeros(0))

    @property
    def active(self) -> bool:
        return bool(len(self.call_ts) or len(self.data[0]))

    @property
    def stacks(self) -> bool:
        return bool(len(self.frames[0]))


def host_threads(index: TraceIndex) -> list[HostThread]:
    """The host threads of a trace, in the order their first event comes in the file; each with
    the backward functions of what ran outside the model's calls (`outside_backward`)."""
    threads = _read_threads(index)
    _mark_outside_backward(threads)
    return threads


def _mark_outside_backward(threads: list[HostThread]) -> None:
    """Each autograd backward function (``evaluate_function: XBackward0``) whose forward operator (the
    same sequence number) ran on a thread whose stacks show the model's calls, outside every one of
    them. Compiling the model compiles its own backward; the backward of a loss computed outside it
    stays eager. Numbers met inside a call on any thread are the model's, whatever else met them:
    autograd counts them per thread, but a trace cannot key them so (a forward operator records "Fwd
    thread id" 0, its backward function the forward thread's profiler number, 1 for the main thread in
    torch 2.11's traces), so two forward threads' numbers pool, and a clash errs towards the model
    (compiled, fused)."""
    inside: list[np.ndarray] = []
    outside: list[np.ndarray] = []
    for thread in threads:
        starts, ends, numbers, backward = thread.sequenced
        if not len(thread.modules[0]) or not len(numbers):
            continue
        forward = ~backward
        within = _inside(thread.modules, (starts[forward] + ends[forward]) / 2)  # (an op may start as a call ends)
        inside.append(numbers[forward][within])
        outside.append(numbers[forward][~within])
    if not outside:
        return
    eager = np.setdiff1d(np.concatenate(outside), np.concatenate(inside))
    if not len(eager):
        return
    for thread in threads:
        starts, ends, numbers, backward = thread.sequenced
        mine = backward & np.isin(numbers, eager)
        if mine.any():
            thread.outside_backward = _merged(starts[mine], ends[mine])


def _read_threads(index: TraceIndex) -> list[HostThread]:
    tables = index.tables
    width = max(1, len(tables["tid"].distinct))
    groups = [group for group in (index.api, index.ops, index.frames) if len(group)]
    if not groups:
        return []
    keys = [group.pid.astype(np.int64) * width + group.tid for group in groups]
    everyone = np.concatenate(keys)
    distinct, inverse = np.unique(everyone, return_inverse=True)
    first_pos = np.full(len(distinct), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_pos, inverse.reshape(-1), np.concatenate([group.pos for group in groups]))
    reading = _Reading(index, _work_end(index))
    threads = []
    for code in np.argsort(first_pos, kind="stable").tolist():
        key = int(distinct[code])
        threads.append(reading.thread([(group, np.flatnonzero(k == key)) for group, k in zip(groups, keys)]))
    return threads


def _work_end(index: TraceIndex) -> float:
    """When the trace's last event other than a record_function range ended (a GPU operation, a
    CUDA call, an operator or a Python frame, on any thread)."""
    ends = [float((group.ts + group.dur).max()) for group in (index.gpu, index.api, index.frames) if len(group)]
    ops = index.ops
    if len(ops):
        is_op = ops.kind != ANNOTATION
        if is_op.any():
            ends.append(float((ops.ts + ops.dur)[is_op].max()))
    return max(ends, default=float("inf"))


def _closed_by_stop(starts: np.ndarray, ends: np.ndarray, ranges: np.ndarray, work_end: float,
                    thread_end: float) -> np.ndarray:
    """The ends of a thread's operator and record_function spans (`ranges` marks the latter), with
    a range the profiler's stop closed cut at the thread's last other event (`thread_end`: its
    Python frames included; -inf for a thread without any, which is left as it is).

    A range still open when the profiler stops (gpudoctor closes its window from an
    ``optimizer.step()`` hook, inside the ``Optimizer.step#`` range) is closed when the trace is
    collected, after everything the thread did: in a trace with Python stacks the tracer has
    closed every frame still open at the stop (the thread's entry point's included) when it
    stopped, so such a range ends after the thread's last frame, and after every other event of
    the trace, GPU work included (`work_end`). The time from the thread's last event to that end
    is the profiler's teardown (65.8 ms after a 28-step, 307 ms window on an H200), not the
    thread's: left in, it became one CPU item at the end of the window, kept whole by every what-if
    and scaled down with the host costs by the calibration. A range that ends earlier (a
    ``ProfilerStep#`` closed by ``prof.step()``, a DataLoader wait that ends the window) and any
    range of a trace without Python stacks, where nothing tells the two apart, stay as recorded."""
    if not np.isfinite(thread_end):
        return ends
    open_at_stop = ranges & (ends > work_end) & (starts < thread_end)
    if not open_at_stop.any():
        return ends
    cut: np.ndarray = np.where(open_at_stop, thread_end, ends)
    return cut


class _Reading:
    """Reads one thread at a time; what holds for a name is found once per distinct name."""

    def __init__(self, index: TraceIndex, work_end: float = float("inf")) -> None:
        names = index.strings.distinct
        self.names = names
        self.work_end = work_end  # the trace's last event other than a record_function range ended here
        self.api_names: dict[int, str] = {}
        self.annotation_kind: dict[int, int] = {}  # 1 DataLoader wait, 2 optimizer step, 0 other
        # (gpudoctor's window frame, the user's own, torch.optim's update function, a module's call)
        self.frame_facts: dict[int, tuple[bool, bool, bool, bool]] = {}
        self.backward_function: dict[int, bool] = {}  # autograd's evaluate_function ranges

    def thread(self, rows: list[tuple[EventColumns, np.ndarray]]) -> HostThread:
        first, last = float("inf"), float("-inf")
        calls = operators = data = optimizer = agent = update = frames = modules = sequenced = None
        annotations = 0
        # with Python stacks: the end of the thread's last event other than a record_function range
        stacked = any(len(mine) and group.kind[mine[0]] == FRAME for group, mine in rows)
        worked = max((float((group.ts[mine] + group.dur[mine])[group.kind[mine] != ANNOTATION].max())
                      for group, mine in rows if len(mine) and (group.kind[mine] != ANNOTATION).any()),
                     default=float("-inf")) if stacked else float("-inf")
        for group, mine in rows:
            if not len(mine):
                continue
            ts, dur = group.ts[mine], group.dur[mine]
            end = _closed_by_stop(ts, ts + dur, group.kind[mine] == ANNOTATION, self.work_end, worked)
            first, last = min(first, float(ts.min())), max(last, float(end.max()))
            kind = group.kind[mine]
            if kind[0] == API:
                calls = self._calls(group, mine, ts, dur)
            elif kind[0] == FRAME:
                agent, update, frames, modules = self._frames(group.name[mine], ts, end)
            else:
                is_op = kind == OP
                operators = _merged(ts[is_op], end[is_op])
                ranges = kind == ANNOTATION
                annotations = int(ranges.sum())
                which = self._annotation_kinds(group.name[mine])
                data = _merged(ts[ranges & (which == 1)], end[ranges & (which == 1)])
                optimizer = _merged(ts[ranges & (which == 2)], end[ranges & (which == 2)])
                sequenced = self._sequenced(group, mine, is_op, ts, end)
        empty = (np.zeros(0), np.zeros(0))
        ts, dur, apis, correlations = calls or (np.zeros(0), np.zeros(0), [], [])
        return HostThread(first=first, last=last, call_ts=ts, call_dur=dur, call_api=apis,
                          call_correlation=correlations, operators=operators or empty, data=data or empty,
                          optimizer=optimizer or empty, agent=agent or empty, update=update or empty,
                          frames=frames or (np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool)),
                          modules=modules or empty, annotations=annotations,
                          sequenced=sequenced if sequenced is not None else _NOT_SEQUENCED)

    def _sequenced(self, group: EventColumns, mine: np.ndarray, is_op: np.ndarray, ts: np.ndarray,
                   end: np.ndarray) -> Sequenced | None:
        """The operators with an autograd sequence number: start, end, number, backward function?"""
        numbers = group.sequence
        if not isinstance(numbers, np.ndarray):  # (ids of other types: none here to tell apart)
            return None
        numbers = numbers[mine]
        has = is_op & (numbers != NO_ID)
        if not has.any():
            return None
        codes = group.name[mine][has]
        backward = self._backward_functions(codes)
        return ts[has], end[has], numbers[has], backward

    def _backward_functions(self, codes: np.ndarray) -> np.ndarray:
        kinds = self.backward_function
        for code in set(codes.tolist()) - kinds.keys():
            kinds[code] = str(self.names[code]).startswith(BACKWARD_FUNCTION)
        return _lookup(kinds, codes, np.bool_)

    def _calls(self, group: EventColumns, mine: np.ndarray, ts: np.ndarray,
               dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str], list[Any]]:
        """The calls sorted as tuples (ts, dur, api, correlation) sort."""
        codes = group.name[mine].tolist()
        apis = [self._api(code) for code in codes]
        correlations = id_list(id_rows(group.correlation, mine))
        ranks = {api: rank for rank, api in enumerate(sorted(set(apis)))}
        order = np.lexsort((np.array([ranks[api] for api in apis], dtype=np.int64), dur, ts))
        ts, dur = ts[order], dur[order]
        same = np.flatnonzero((ts[1:] == ts[:-1]) & (dur[1:] == dur[:-1]))
        ordered = order.tolist()
        if len(same) and any(apis[ordered[k]] == apis[ordered[k + 1]] for k in same.tolist()):
            # calls alike but for their correlation: the tuples' own order decides
            rows = sorted(zip(ts.tolist(), dur.tolist(), [apis[k] for k in ordered],
                              [correlations[k] for k in ordered]))
            return (np.array([r[0] for r in rows], dtype=np.float64), np.array([r[1] for r in rows], dtype=np.float64),
                    [r[2] for r in rows], [r[3] for r in rows])
        return ts, dur, [apis[k] for k in ordered], [correlations[k] for k in ordered]

    def _api(self, code: int) -> str:
        api = self.api_names.get(code)
        if api is None:
            api = self.api_names[code] = _VERSION.sub("", self.names[code])
        return api

    def _annotation_kinds(self, codes: np.ndarray) -> np.ndarray:
        kinds = self.annotation_kind
        for code in set(codes.tolist()) - kinds.keys():
            name = self.names[code]
            kinds[code] = 1 if DATA_ANNOTATION.match(name) else 2 if name.startswith(OPTIMIZER_ANNOTATION) else 0
        return _lookup(kinds, codes, np.int8)

    def _frames(self, codes: np.ndarray, ts: np.ndarray, end: np.ndarray) -> tuple[Spans, Spans, Frames, Spans]:
        """gpudoctor's window-closing frames, torch.optim's update functions, every frame, and the
        outermost nn.Module calls (a loss module's left out: not the model)."""
        facts = self.frame_facts
        for code in set(codes.tolist()) - facts.keys():
            name = self.names[code].replace("\\", "/")
            match = _FRAME_NAME.match(name)
            facts[code] = (AGENT_WINDOW_FRAME in name,
                           match is not None and frame_kind(match["file"]) in ("user", "stdlib"),
                           OPTIMIZER_UPDATE_FRAME.search(name) is not None,
                           name.startswith(MODULE_FRAME) and not LOSS_MODULE_FRAME.match(name))
        is_agent, own, update, module = (_lookup({code: fact[k] for code, fact in facts.items()}, codes, np.bool_)
                                         for k in range(4))
        return (_merged(ts[is_agent], end[is_agent]), _merged(ts[update], end[update]), (ts, end, own),
                _merged(ts[module], end[module]))


def _lookup(table: dict[int, Any], codes: np.ndarray, dtype: Any) -> np.ndarray:
    """table[code] for each code."""
    if not len(codes):
        return np.zeros(0, dtype=dtype)
    values = np.zeros(int(codes.max()) + 1, dtype=dtype)
    for code, value in table.items():
        if code < len(values):
            values[code] = value
    picked: np.ndarray = values[codes]
    return picked


def _merged(starts: np.ndarray, ends: np.ndarray) -> Spans:
    """The spans merged into sorted disjoint ones (touching spans merge)."""
    if not len(starts):
        return np.zeros(0), np.zeros(0)
    order = np.lexsort((ends, starts))
    merged_starts, merged_ends, _ = blocks(starts[order], ends[order])
    return merged_starts, merged_ends


def _inside(spans: Spans, at: np.ndarray) -> np.ndarray:
    """Is each time within one of the spans (ends included)?"""
    starts, ends = spans
    if not len(starts) or not len(at):
        return np.zeros(len(at), dtype=bool)
    i = np.searchsorted(starts, at, side="right") - 1
    return (i >= 0) & (at <= ends[np.maximum(i, 0)])


def _any_within(times: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Does each [a, b] hold one of the sorted `times`?"""
    return np.searchsorted(times, b, side="right") > np.searchsorted(times, a, side="left")


def _overlaps(spans: Spans, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How much of each [a, b) the spans cover: the pieces added from 0.0 in time order."""
    starts, ends = spans
    total = np.zeros(len(a))
    if not len(starts) or not len(a):
        return total
    span = np.maximum(np.searchsorted(starts, a, side="right") - 1, 0)  # the first span that may reach a
    high = np.searchsorted(starts, b, side="left")  # the spans that start before b
    rows = np.flatnonzero(high > span)
    span = span[rows]
    for _ in range(OVERLAP_ROUNDS):  # one span of every gap at a time, while gaps hold more
        lo, hi = np.maximum(a[rows], starts[span]), np.minimum(b[rows], ends[span])
        total[rows] += np.where(hi > lo, hi - lo, 0.0)
        span += 1
        more = span < high[rows]
        rows, span = rows[more], span[more]
        if not len(rows):
            return total
    for row, first in zip(rows.tolist(), span.tolist()):  # the few gaps over that many spans
        covered, start, end = float(total[row]), float(a[row]), float(b[row])
        for i in range(first, int(high[row])):
            piece = min(end, float(ends[i])) - max(start, float(starts[i]))
            if piece > 0:
                covered += piece
        total[row] = covered
    return total


def _user_spans(frames: Frames) -> Spans:
    """Where the innermost Python frame is the user's own code (not torch, a library or a builtin)."""
    starts, ends, own = frames
    spans: list[tuple[float, float]] = []
    stack: list[tuple[float, float, bool]] = []
    cursor = float("-inf")
    order = np.lexsort((-ends, starts))
    for frame in zip(starts[order].tolist(), ends[order].tolist(), own[order].tolist()):
        start = frame[0]
        while stack and stack[-1][1] <= start:
            top = stack.pop()
            end = top[1]
            if end > cursor:  # (the cursor only moves on: max(cursor, end), written out)
                if top[2]:
                    spans.append((cursor, end))
                cursor = end
        if start > cursor:
            if stack and stack[-1][2]:
                spans.append((cursor, start))
            cursor = start
        stack.append(frame)
    while stack:
        top = stack.pop()
        end = top[1]
        if end > cursor:
            if top[2]:
                spans.append((cursor, end))
            cursor = end
    if not spans:
        return np.zeros(0), np.zeros(0)
    return _merged(np.array([s for s, _ in spans]), np.array([e for _, e in spans]))




def thread_items(number: int, thread: HostThread, corr_ops: dict[Any, list[int]],
                 ops: list[GpuOp]) -> tuple[HostColumns, int]:
    """The thread's items in measured order; how many launch calls it made."""
    calls = _Calls(thread, corr_ops, ops)
    gaps = _gaps(thread, calls)
    count = len(calls.kept)
    # per gap four pieces (data, dispatch, user, python), then the call that ends it (the last gap: none)
    rows = np.full((count + 1, 5), -1, dtype=np.int64)
    rows[:, :4] = np.where(gaps.keep, np.arange(4 * (count + 1)).reshape(-1, 4), -1)
    rows[:count, 4] = 4 * (count + 1) + np.arange(count)
    order = rows[rows >= 0]
    piece = order < 4 * (count + 1)
    starts = np.concatenate((gaps.starts.reshape(-1), calls.ts[calls.kept]))[order]
    lengths = np.concatenate((gaps.lengths.reshape(-1), calls.dur[calls.kept]))[order]
    call_of = np.where(piece, -1, order - 4 * (count + 1)).tolist()
    call_tags = np.append(calls.tags, 0)  # (the pieces index it too, at 0)
    tag_of = np.where(piece, order % 4, 4 + call_tags[np.maximum(order - 4 * (count + 1), 0)]).tolist()
    kinds = [CPU if k < 0 else calls.kinds[k] for k in call_of]
    tags = [_TAGS[code] for code in tag_of]
    queued = [[] if k < 0 else calls.queued[k] for k in call_of]
    apis = [("", False, None) if k < 0 else calls.facts[k] for k in call_of]
    count = len(kinds)
    optimizer = _inside(thread.optimizer, starts)
    host = HostColumns(kind=kinds, thread=[number] * count, ts=starts.tolist(), dur=lengths.tolist(), tag=tags,
                       ops=queued, scope=[None] * count, waited=[False] * count, post=[0.0] * count,
                       agent=[fact[1] for fact in apis], api=[fact[0] for fact in apis],
                       read=[fact[2] for fact in apis], optimizer=optimizer.tolist(),
                       fused=_fused(optimizer, thread.update, starts).tolist(),
                       call=_module_calls(thread.modules, gaps, calls)[order].tolist(), engine=[False] * count,
                       outside=_inside(thread.outside_backward, starts).tolist())
    return host, calls.launches


def _module_calls(modules: Spans, gaps: _GapPieces, calls: _Calls) -> np.ndarray:
    """The outermost module call of every gap piece, then of every kept call (-1: none). A call is
    where it starts; a gap's pieces (laid back to back, their order inside it not recorded) are a
    call's only when the whole gap lies in it: a gap across a call's end holds Python of the loop's."""
    a = gaps.starts[:, 0]
    b = a + gaps.lengths.sum(axis=1)
    first, last = _span_of(modules, a), _span_of(modules, np.maximum(a, np.nextafter(b, a)))
    pieces = np.repeat(np.where(first == last, first, -1), 4)
    return np.concatenate((pieces, _span_of(modules, calls.ts[calls.kept])))


def _span_of(spans: Spans, at: np.ndarray) -> np.ndarray:
    """Per time in `at`, the index of the span (sorted, disjoint) that holds it, else -1."""
    starts, ends = spans
    k = np.searchsorted(starts, at, side="right") - 1
    inside = (k >= 0) & (at < ends[np.maximum(k, 0)]) if len(starts) else np.zeros(len(at), dtype=bool)
    return np.where(inside, k, -1)


def _fused(optimizer: np.ndarray, update: Spans, starts: np.ndarray) -> np.ndarray:
    """Per item (by its start), what a fused or foreach optimizer replaces of the per-parameter one:
    inside optimizer.step() (`optimizer`), and inside its update function where the thread's Python
    stacks show it (`update`). torch.optim's step() runs its wrapper, its hooks and ``_init_group``
    (a Python loop over the parameters) whichever implementation it dispatches to; only the update
    function differs (``_single_tensor_adam``: a few kernels per parameter, ``_fused_adam``: a few in
    all). Measured on an H200 (tests/fixtures/h200 tiny_kernels, AdamW over 160 parameters,
    foreach=False): ``_init_group`` 1.7 ms and the update function 38.6 ms of a 40.6 ms step, traced.
    Without stacks nothing tells them apart: the whole step."""
    if not len(update[0]):
        return optimizer
    fused: np.ndarray = optimizer & _inside(update, starts)
    return fused


_TAGS = (DATA, DISPATCH, USER, PYTHON, PYTHON, DISPATCH, DATA)  # gap pieces 0-3, calls 4 + _Calls.tags


class _Calls:
    """A thread's calls: which ran inside another (their GPU work is that call's), and what
    each of the others becomes."""

    def __init__(self, thread: HostThread, corr_ops: dict[Any, list[int]], ops: list[GpuOp]) -> None:
        self.ts, self.dur = ts, dur = thread.call_ts, thread.call_dur
        linked = [corr_ops.get(corr, []) if corr is not None else [] for corr in thread.call_correlation]
        sizes = np.fromiter(map(len, linked), dtype=np.int64, count=len(linked))
        queued = sizes > 0
        # per call: does it queue a kernel, a device-to-host copy? (its operations, flattened)
        call_of = np.repeat(np.arange(len(linked)), sizes)
        queued_ops = np.fromiter(chain.from_iterable(linked), dtype=np.int64, count=int(sizes.sum()))
        kernel_op, read_op = _op_flags(ops)
        kernels = np.bincount(call_of, weights=kernel_op[queued_ops], minlength=len(linked)) > 0
        reads = np.bincount(call_of, weights=read_op[queued_ops], minlength=len(linked)) > 0
        operators = thread.operators
        # outermost operator spans that launched GPU work: their CPU time is dispatch overhead
        launched = _any_within(ts[queued], *operators)
        self.dispatch: Spans = (operators[0][launched], operators[1][launched])
        # a call that ends before the calls before it did ran inside one of them (a driver call
        # inside the runtime call that made it): its GPU work goes to the last call kept
        end = ts + dur
        self.before = np.maximum(thread.first, np.concatenate(([-np.inf], np.maximum.accumulate(end)[:-1]))) \
            if len(ts) else np.zeros(0)
        inner = end <= self.before
        inner[:1] = False
        self.kept = kept = np.flatnonzero(~inner)
        self.cursor = max(thread.first, float(end.max())) if len(ts) else thread.first  # after the last call
        at = ts[kept]
        self.tags = np.where(_inside(thread.data, at), 2, np.where(_inside(self.dispatch, at), 1, 0))
        agent = _inside(thread.agent, at).tolist()
        read = _read_backs(operators, at, ts[reads], ts[kernels])
        self.kinds: list[int] = []
        self.queued: list[list[int]] = []
        self.facts: list[tuple[str, bool, tuple[float, float] | None]] = []  # api, gpudoctor's own, read back
        self.launches = 0
        for row, k in enumerate(kept.tolist()):
            api = thread.call_api[k]
            if linked[k]:
                self.kinds.append(LAUNCH)
                self.launches += api in KERNEL_LAUNCH_APIS or api in GRAPH_LAUNCH_APIS
                self.facts.append((api, False, None))
            elif api in SYNC_APIS:
                self.kinds.append(SYNC)
                self.facts.append((api, agent[row], read[row]))
            else:
                self.kinds.append(CPU)
                self.facts.append((api, False, None))
            self.queued.append(list(linked[k]))
        for k in np.flatnonzero(inner).tolist():
            self.queued[int(np.searchsorted(kept, k)) - 1].extend(linked[k])


def _op_flags(ops: list[GpuOp]) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU operation: a kernel? a device-to-host copy?"""
    return (np.array([op.kind == "k" for op in ops], dtype=bool),
            np.array([(op.copy or "").startswith("DtoH") for op in ops], dtype=bool))


@dataclass
class _GapPieces:
    starts: np.ndarray  # (gaps, 4): where each piece begins
    lengths: np.ndarray  # (gaps, 4)
    keep: np.ndarray  # (gaps, 4): the pieces that become items


def _gaps(thread: HostThread, calls: _Calls) -> _GapPieces:
    """The time before each kept call and after the last, [a, b), split into CPU items by what
    covered it: a DataLoader wait, dispatch of GPU work, the user's own Python, other Python (in
    that order, back to back: their order inside the gap is not recorded)."""
    a = np.append(calls.before[calls.kept], calls.cursor)
    b = np.append(calls.ts[calls.kept], thread.last)
    length = b - a
    data = _overlaps(thread.data, a, b)
    # an operator inside a DataLoader wait is data
    dispatched = np.minimum(_overlaps(calls.dispatch, a, b), length - data)
    rest = np.maximum(0.0, length - data - dispatched)
    user_spans = _user_spans(thread.frames)
    user = np.minimum(rest, _overlaps(user_spans, a, b)) if len(user_spans[0]) else np.zeros(len(a))
    lengths = np.stack((data, dispatched, user, rest - user), axis=1)
    starts = [a]
    for piece in (data, dispatched, user):
        starts.append(np.where(piece > 0, starts[-1] + piece, starts[-1]))
    return _GapPieces(np.stack(starts, axis=1), lengths, (lengths > 0) & (b > a)[:, None])


def _read_backs(operators: Spans, at: np.ndarray, read_ts: np.ndarray,
                kernel_ts: np.ndarray) -> list[tuple[float, float] | None]:
    """The operator around each time when all it does is read a value back: a device-to-host
    copy and no kernel (``.item()``, ``.cpu()`` of a result); None for the others."""
    starts, ends = operators
    if not len(starts) or not len(at):
        return [None] * len(at)
    i = np.maximum(np.searchsorted(starts, at, side="right") - 1, 0)
    a, b = starts[i], ends[i]
    only_reads = (a <= at) & (at <= b) & _any_within(read_ts, a, b) & ~_any_within(kernel_ts, a, b)
    return [(s, e) if ok else None for s, e, ok in zip(a.tolist(), b.tolist(), only_reads.tolist())]
