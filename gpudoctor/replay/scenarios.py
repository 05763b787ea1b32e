"""The what-ifs: one edit of the measured timeline per cause, re-simulated.

- ``data``: every DataLoader wait gone (batches arrive instantly).
- ``sync``: the workload's synchronisations and blocking device-to-host copies no
  longer block the host (values read rarely, kept on the GPU).
- ``launch``: each chain of launches outside ``optimizer.step()`` (operators that
  launched GPU work and the Python between them, up to the next blocking call,
  data wait or long user code) issued as one captured graph: one launch call's
  host cost, the kernels back to back at the graph rate measured on an H200.
  Launch cost only: what fusion saves on the GPU is not counted. This is what
  compiling the model buys; the optimizer is not part of it.
- ``optimizer``: the same for the launches inside each ``optimizer.step()``: what
  a fused or foreach optimizer buys over per-parameter kernels.
- ``pinned``: host-to-device copies of 64 KiB or more from pageable memory made
  pinned and asynchronous: their bytes at the pinned rate measured in the trace, else
  the link's pinned rate in `rates` (never a ratio to the pageable copy, whose rate
  depends on the host), their calls costing the host what a launch costs in this trace.
- ``small_copies``: runs of host-to-device copies under 64 KiB (the user's loop over
  the tensors and the kernels consuming them may come between) stacked on the host
  and copied once.
- ``tf32``: fp32 GEMM kernels at the TF32 rate (`rates.tf32_speedup`).

Calibration: tracing (with Python stacks) slows the host. When the run's steady
steps outside the window are known, host costs (CPU items except data waits, and
launch calls) are scaled so that the replay as measured takes the unprofiled
step time; the scale is reported.
"""

from __future__ import annotations

import bisect
import logging
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudoctor.collectors.window_picture import BINS, picture_range, span_list
from gpudoctor.replay import rates
from gpudoctor.replay.simulate import Plan, Result, run
from gpudoctor.replay.timeline import (
    BLOCKING_COPY,
    CPU,
    DATA,
    DISPATCH,
    LAUNCH,
    PYTHON,
    SYNC,
    USER,
    HostItem,
    Timeline,
    build,
)
from gpudoctor.session import ReplayScenario, ReplaySummary

log = logging.getLogger(__name__)

SMALL_COPY_BYTES = 64 * 1024  # Nsight Systems' line for small synchronous copies
GLUE_MAX_US = 100.0  # without Python stacks: shorter Python between launches is glue a compiler removes
MIN_HOST_SCALE = 0.2  # tracing with stacks slowed the host at most 5x in the H200 fixtures
MIN_GAIN_FOR_PAIRS = 1.02  # scenarios that change less are not combined with others
MAX_ITEMS = 2_000_000  # beyond this the replay is skipped (reported), the statistics still come

Edit = Callable[[Timeline, Plan], tuple[int, str]]


@dataclass(frozen=True)
class Scenario:
    """One what-if: its name (what a check's prediction and `Fix.scenarios` name), the label the
    report gives it, and the edit that removes the cause from a copy of the measured plan,
    returning how many items it changed (0: the scenario does not apply) and a detail line."""

    name: str
    label: str  # "if batches arrived instantly"
    edit: Edit


def replay_trace(events: Any, steps: int = 0, unprofiled_step_us: float | None = None,
                 unprofiled_wait_us: float | None = None,
                 scenarios: Iterable[Scenario] | None = None) -> ReplaySummary | None:
    """Replay one trace's events: the measured window and each applicable what-if.

    `unprofiled_step_us` and `unprofiled_wait_us` (mean step time and data wait per step
    outside the window) calibrate the replay when the run measured them. `scenarios`: the
    what-ifs to replay; None: the registered ones (SCENARIOS), in their order.
    """
    known = {s.name: s for s in (SCENARIOS.values() if scenarios is None else scenarios)}
    from gpudoctor.collectors.trace_decode import index_events
    from gpudoctor.replay.window import latest_stretch

    began = time.perf_counter()
    index, steps, scope = latest_stretch(index_events(events), steps)
    timeline = build(index)
    if timeline is None:
        return None
    if len(timeline.items) + len(timeline.ops) > MAX_ITEMS:
        return ReplaySummary(steps=steps, scope=scope, measured_span_us=round(timeline.measured_span_us, 3),
                             error=f"the window holds {len(timeline.items) + len(timeline.ops):,} host items and "
                                   "GPU operations: too many to replay")
    scale, data_scale, calibration = _calibrate(timeline, steps, unprofiled_step_us, unprofiled_wait_us)
    measured = Plan.measured(timeline, scale, data_scale)
    base = run(timeline, measured, record=True)
    drawn = _drawn_items(timeline, picture_range(index))
    summary = ReplaySummary(
        steps=steps,
        scope=scope,
        measured_span_us=round(timeline.measured_span_us, 3),
        baseline_span_us=round(base.span_us, 3),
        baseline_gpu_busy_us=round(base.gpu_busy_us, 3),
        baseline_kernel_busy_us=round(base.kernel_busy_us, 3),
        host_scale=round(scale, 4),
        data_scale=round(data_scale, 4),
        calibration=calibration,
        launch_latency_us=round(timeline.launch_latency_us, 3),
        queued_gap_us=round(timeline.queued_gap_us, 3),
    )
    summary.baseline_picture, summary.baseline_picture_bins, summary.baseline_picture_span_us = \
        _picture(timeline, base, drawn)
    plans: dict[str, Plan] = {}
    for name, scenario in known.items():
        plan = measured.copy()
        changed, detail = scenario.edit(timeline, plan)
        if not changed:
            continue
        result = run(timeline, plan, record=True)
        plans[name] = plan
        drawn_spans, drawn_bins, drawn_span = _picture(timeline, result, drawn)
        summary.scenarios.append(ReplayScenario(name=name, label=scenario.label, span_us=round(result.span_us, 3),
                                                gpu_busy_us=round(result.gpu_busy_us, 3),
                                                kernel_busy_us=round(result.kernel_busy_us, 3), changed=changed,
                                                detail=detail, picture=drawn_spans, picture_bins=drawn_bins,
                                                picture_span_us=drawn_span))
    useful = [s.name for s in summary.scenarios if base.span_us / max(s.span_us, 1e-9) >= MIN_GAIN_FOR_PAIRS]
    for i, first in enumerate(useful):
        for second in useful[i + 1:]:
            plan = measured.copy()
            known[first].edit(timeline, plan)
            known[second].edit(timeline, plan)
            summary.combined[f"{first}+{second}"] = round(run(timeline, plan).span_us, 3)
    summary.seconds = round(time.perf_counter() - began, 3)
    return summary


def _drawn_items(timeline: Timeline, drawn: tuple[float, float, list[float]]) -> tuple[int, int] | None:
    """The main thread's first item in the steps a report draws (collectors.window_picture.picture_range) and
    its first item after them (len(items): none), by position in timeline.items."""
    t0, t1, _ = drawn
    times = [item.ts for item in timeline.items]  # in measured order

    def first_main(at: float) -> int:
        i = bisect.bisect_left(times, at)
        while i < len(times) and timeline.items[i].thread != timeline.main_thread:
            i += 1
        return i

    first = first_main(t0)
    return (first, first_main(t1)) if first < len(times) else None


def _picture(timeline: Timeline, result: Result,
             bounds: tuple[int, int] | None) -> tuple[list[float], list[float], float | None]:
    """The GPU's replayed work in the steps a report draws: from the replayed start of the main
    thread's first item in them to that of its first item after (`bounds`, _drawn_items)."""
    if bounds is None or result.op_spans is None or result.item_starts is None:
        return [], [], None
    first, after = bounds
    begin = result.item_starts[first]
    end = result.item_starts[after] if after < len(result.item_starts) else timeline.start + result.span_us
    if end <= begin:
        return [], [], None
    spans = np.array(result.op_spans, dtype=np.float64).reshape(-1, 2)
    return (*span_list(spans[:, 0], spans[:, 1], begin, end, (end - begin) / BINS), round(end - begin, 1))


def replay_or_error(events: Any, steps: int = 0, unprofiled_step_us: float | None = None,
                    unprofiled_wait_us: float | None = None) -> ReplaySummary | None:
    """replay_trace that never raises: a model that cannot be built is reported, not fatal."""
    try:
        return replay_trace(events, steps, unprofiled_step_us, unprofiled_wait_us)
    except Exception as exc:  # the statistics and every other check still stand
        log.debug("replay failed", exc_info=True)
        return ReplaySummary(steps=steps, error=f"the window could not be replayed: {type(exc).__name__}: {exc}")


def _calibrate(timeline: Timeline, steps: int, step_us: float | None,
               wait_us: float | None) -> tuple[float, float, str]:
    """(host scale, data-wait scale, how they were chosen).

    Data waits are scaled to the unprofiled wait per step. Host costs are scaled so that
    the replay without data waits takes the unprofiled step time less its data wait:
    with data waits in the target, a loop paced by its loader would hide how much the
    tracing slowed its host.
    """
    if not steps or not step_us or step_us <= 0:
        return 1.0, 1.0, "not calibrated (no steady step time outside the window): host costs as traced"
    data_items = [i for i, item in enumerate(timeline.items) if item.kind == CPU and item.tag == DATA]
    window_wait = sum(timeline.items[i].dur for i in data_items)
    data_scale = 1.0
    if data_items and wait_us is not None and window_wait > 0:
        data_scale = max(0.0, wait_us * steps / window_wait)
    without_data = bool(data_items) and wait_us is not None
    target = steps * (step_us - (wait_us or 0.0) if without_data else step_us)
    what = "the unprofiled step time less its data wait" if without_data else "the unprofiled step time"

    def span(scale: float) -> float:
        plan = Plan.measured(timeline, scale, data_scale)
        if without_data:
            for i in data_items:
                plan.cost[i] = 0.0
        return run(timeline, plan).span_us

    waits = (
        f"; data waits scaled by {data_scale:.2f} to the unprofiled wait" if data_items and data_scale != 1.0 else ""
    )
    full = span(1.0)
    if target <= 0 or full <= target * 1.02:
        return 1.0, data_scale, (f"host costs as traced: the replay takes {full / steps / 1e3:.3g} ms per step against "
                                 f"{target / steps / 1e3:.3g} ms, {what}{waits}")
    low = span(MIN_HOST_SCALE)
    if low > target and (full - low) < 0.5 * (full - target):
        return 1.0, data_scale, (f"host costs as traced: {full / steps / 1e3:.3g} ms per step against "
                                 f"{target / steps / 1e3:.3g} ms ({what}) is not the tracing's host overhead{waits}")
    lo, hi = MIN_HOST_SCALE, 1.0
    for _ in range(10):
        mid = (lo + hi) / 2
        if span(mid) > target:
            hi = mid
        else:
            lo = mid
    scale = hi if low <= target else MIN_HOST_SCALE
    return scale, data_scale, (f"host costs scaled by {scale:.2f} so the replay takes {what} "
                               f"({target / steps / 1e3:.3g} ms per step; {full / steps / 1e3:.3g} ms as traced): "
                               f"tracing slowed the host{waits}")


# ---- the edits: each changes a copy of the measured plan; returns (items/ops changed, detail) ----

def _data(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    changed = 0
    for i, item in enumerate(timeline.items):
        if item.kind == CPU and item.tag == DATA and plan.cost[i] > 0:
            plan.cost[i] = 0.0
            changed += 1
    return changed, "DataLoader waits (time in __next__ on the host) removed"


def _sync(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """The workload's syncs stop blocking; an operator that only read a value back (``.item()``,
    ``.cpu()`` of a result) goes altogether: the remedy keeps the value on the GPU."""
    changed = 0
    reads: dict[int, list[tuple[float, float]]] = {}
    for i, item in enumerate(timeline.items):
        if item.agent:
            continue
        if item.kind == SYNC or (item.kind == BLOCKING_COPY and _copies(timeline, item, "DtoH")):
            if plan.blocks[i]:
                plan.blocks[i] = False
                plan.cost[i] = min(item.dur, item.post) if item.waited else item.dur
                changed += 1
            if item.read is not None:
                reads.setdefault(item.thread, []).append(item.read)
    covered = {thread: _union(spans) for thread, spans in reads.items()}
    for i, item in enumerate(timeline.items):
        union = covered.get(item.thread)
        if union and item.tag in (DISPATCH, PYTHON) and _inside(union, item.ts):
            plan.cost[i], plan.blocks[i] = 0.0, False
    return changed, ("synchronisations no longer block the host; operators that only read a value back "
                     "(.item(), .cpu()) dropped: the values stay on the GPU")


def _union(spans: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The half-open spans [a, b) merged into disjoint ones: (starts, ends), in order."""
    starts: list[float] = []
    ends: list[float] = []
    for a, b in sorted(s for s in spans if s[0] < s[1]):
        if ends and a <= ends[-1]:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return starts, ends


def _inside(union: tuple[list[float], list[float]], t: float) -> bool:
    """Is t in one of the merged spans (a <= t < b)? A bisection, not a walk over every span."""
    starts, ends = union
    k = bisect.bisect_right(starts, t) - 1
    return k >= 0 and t < ends[k]


def _launch(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """The model's launch chains as graphs (what torch.compile / CUDA graphs of the model buy)."""
    changed, chains = _collapse(timeline, plan, optimizer=False)
    glue = ("framework Python removed, the user's own Python kept" if timeline.stacks
            else f"Python stretches under {GLUE_MAX_US:.0f} us removed")
    return changed, (f"{chains:,} launch chains outside optimizer.step() issued as one graph each: the host cost "
                     f"of one launch call, {glue}; {rates.GRAPH_SOURCE}")


def _optimizer(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """optimizer.step()'s launches as one chain each (a fused or foreach optimizer's few kernels)."""
    changed, chains = _collapse(timeline, plan, optimizer=True)
    return changed, (f"{chains:,} optimizer steps' launches issued back to back as one chain each (a fused or "
                     f"foreach optimizer's few multi-tensor kernels); {rates.GRAPH_SOURCE}")


def _collapse(timeline: Timeline, plan: Plan, *, optimizer: bool) -> tuple[int, int]:
    changed, chains = 0, 0
    for chain in _chains(timeline, plan, optimizer):
        launches = [i for i in chain if timeline.items[i].kind == LAUNCH]
        if len(launches) < 2:
            continue  # one launch: nothing to capture, a compiled call costs what the launch did
        head = launches[0]
        chains += 1
        for i in chain:
            item = timeline.items[i]
            if i != head and plan.cost[i] > 0:
                plan.cost[i] = 0.0
                changed += 1
            for j in item.ops:
                plan.launch_at[j] = head
                plan.ready[j] = timeline.launch_latency_us
                plan.gap[j] = max(0.0, rates.GRAPH_KERNEL_US - plan.dur[j])
    return changed, chains


def _chains(timeline: Timeline, plan: Plan, optimizer: bool = False) -> list[list[int]]:
    """Per thread, maximal runs of items a captured graph would replace: launches, their
    dispatch, and the Python between them (framework Python whatever its length when the
    trace tells it from the user's, else short stretches only); the user's own long Python,
    data waits and blocking calls end a chain, and so does crossing into or out of
    optimizer.step() (`optimizer` picks which side is chained)."""
    chains: list[list[int]] = []
    current: dict[int, list[int]] = {}
    for i, item in enumerate(timeline.items):
        if item.optimizer != optimizer:
            joins = False
        elif item.kind == LAUNCH:
            joins = not _copies(timeline, item, "HtoD_pageable")
        elif item.kind != CPU:
            joins = False
        elif item.tag == DISPATCH:
            joins = True
        elif item.tag == PYTHON:
            joins = timeline.stacks or plan.cost[i] < GLUE_MAX_US
        else:
            joins = item.tag == USER and plan.cost[i] < GLUE_MAX_US
        if joins:
            current.setdefault(item.thread, []).append(i)
        elif item.thread in current:
            chains.append(current.pop(item.thread))
    chains.extend(current.values())
    return chains


def _pinned(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    pinned_rate, source = _pinned_rate(timeline)
    changed = 0
    cost = _launch_cost(timeline, plan)
    rate = pinned_rate or rates.PINNED_BYTES_PER_US
    for i, item in enumerate(timeline.items):
        big = [j for j in item.ops if timeline.ops[j].copy == "HtoD_pageable"
               and timeline.ops[j].nbytes >= SMALL_COPY_BYTES]
        if not big:
            continue
        for j in big:
            op = timeline.ops[j]
            # the bytes at the pinned rate, never slower than the pageable copy measured: the pageable
            # rate varies with the host (staging through its memory), the pinned one is the link's
            plan.dur[j] = min(op.dur, op.nbytes / rate)
        plan.blocks[i] = False
        plan.cost[i] = min(plan.cost[i], cost) if item.kind == LAUNCH else cost
        changed += 1
    return changed, f"pageable host-to-device copies of 64 KiB or more pinned and asynchronous ({source})"


def _pinned_rate(timeline: Timeline) -> tuple[float | None, str]:
    """Bytes per us of this trace's own pinned host-to-device copies, when it has some."""
    nbytes = us = 0.0
    for op in timeline.ops:
        if op.copy == "HtoD_pinned" and op.nbytes >= SMALL_COPY_BYTES:
            nbytes, us = nbytes + op.nbytes, us + op.dur
    if us > 0 and nbytes > 0:
        return nbytes / us, f"at the pinned rate measured in this trace, {nbytes / us / 1e3:.1f} GB/s"
    return None, (f"at {rates.PINNED_BYTES_PER_US / 1e3:.1f} GB/s, the pinned rate {rates.PINNED_SOURCE}; "
                  "the copy calls' host cost replaced by a launch's, as measured in this trace")


def _small_copies(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """A burst of tiny host-to-device copies is launch and API cost: stacked on the host, one copy.

    A run lasts from a thread's first small copy while only Python (the framework's or the
    user's own loop over the tensors), operator dispatch, syncs and at most one kernel (the
    one consuming the tensor just copied) come between two copies. The copies after the first ride with it (their
    bytes at the pinned rate); the dispatch and syncs between two copies go with them (the
    per-tensor ``.to()``); the kernels stay, and the syncs before them no longer block (the
    stacked copy was made before them)."""
    pinned_rate, _ = _pinned_rate(timeline)
    rate = pinned_rate or rates.PINNED_BYTES_PER_US
    cost = _launch_cost(timeline, plan)
    changed = runs = 0
    head: dict[int, int] = {}  # thread -> the first small copy of its current run
    folded: dict[int, int] = {}  # thread -> copies folded into that one so far
    between: dict[int, list[int]] = {}  # dispatch items and syncs since the last small copy
    consumed: dict[int, bool] = {}  # a kernel came since the last small copy
    for i, item in enumerate(timeline.items):
        thread = item.thread
        if _small_copy(timeline, item):
            consumed[thread] = False
            if thread not in head:
                head[thread], folded[thread], between[thread] = i, 0, []
                continue
            first = head[thread]
            for j in item.ops:  # carried by the run's first copy
                plan.dur[timeline.items[first].ops[0]] += timeline.ops[j].nbytes / rate
                plan.dur[j], plan.gap[j], plan.launch_at[j] = 0.0, 0.0, first
            plan.cost[i], plan.blocks[i] = 0.0, False
            for k in between[thread]:  # the per-tensor .to() dispatch and its stream sync go with the copy
                plan.cost[k], plan.blocks[k] = 0.0, False
            between[thread] = []
            changed += 1
            folded[thread] += 1
            if folded[thread] == 1:
                runs += 1
                plan.blocks[first] = False
                plan.cost[first] = min(plan.cost[first], cost)
        elif thread not in head:
            continue
        elif (item.kind == CPU and item.tag == DISPATCH) or (item.kind == SYNC and not item.agent):
            between[thread].append(i)
        elif (item.kind == LAUNCH and item.ops and all(timeline.ops[j].kind == "k" for j in item.ops)
              and not consumed.get(thread)):
            # one kernel between two copies consumes the tensor just copied: it stays, with its
            # dispatch, and the copy's sync before it no longer blocks. A second one is the step's
            # own work: the run ends there (the next step's tensors do not exist yet)
            consumed[thread] = True
            for k in between[thread]:
                if timeline.items[k].kind == SYNC:
                    plan.cost[k], plan.blocks[k] = 0.0, False
            between[thread] = []
        elif not (item.kind == CPU and item.tag in (PYTHON, USER)):
            del head[thread]
    return changed, f"{changed:,} small host-to-device copies folded into {runs:,} stacked copies"


def _small_copy(timeline: Timeline, item: HostItem) -> bool:
    return item.kind in (LAUNCH, BLOCKING_COPY) and bool(item.ops) and all(
        timeline.ops[j].kind == "c" and (timeline.ops[j].copy or "").startswith("HtoD")
        and timeline.ops[j].nbytes < SMALL_COPY_BYTES for j in item.ops)


def _tf32(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    changed = 0
    for j, op in enumerate(timeline.ops):
        if op.gemm == "fp32":
            plan.dur[j] = op.dur / rates.tf32_speedup(op.dur)
            changed += 1
    return changed, f"fp32 GEMM kernels at the TF32 rate ({rates.TF32_SOURCE})"


def _copies(timeline: Timeline, item: HostItem, prefix: str) -> bool:
    return any((timeline.ops[j].copy or "").startswith(prefix) for j in item.ops)


def _launch_cost(timeline: Timeline, plan: Plan) -> float:
    costs = [plan.cost[i] for i, item in enumerate(timeline.items) if item.kind == LAUNCH and item.ops
             and all(timeline.ops[j].kind == "k" for j in item.ops)]
    return statistics.median(costs) if costs else 5.0


# the built-in what-ifs, in the order they are replayed and reported
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("data", "if batches arrived instantly", _data),
    Scenario("sync", "if the host never waited for the GPU", _sync),
    Scenario("launch", "if the model's launch chains were captured graphs", _launch),
    Scenario("optimizer", "if each optimizer step were a few fused kernels", _optimizer),
    Scenario("pinned", "if pageable copies were pinned and asynchronous", _pinned),
    Scenario("small_copies", "if small copies were stacked into one", _small_copies),
    Scenario("tf32", "if fp32 matmuls ran on TF32 tensor cores", _tf32),
)}


def register(scenario: Scenario) -> Scenario:
    """Add a what-if to every replay after the built-ins (a check's prediction then names it:
    ``predict(session, scenario.name, ...)``). The same scenario again is harmless; another
    under a taken name is an error."""
    known = SCENARIOS.get(scenario.name)
    if known is not None and known != scenario:
        raise ValueError(f"replay scenario {scenario.name!r} is already registered")
    SCENARIOS[scenario.name] = scenario
    return scenario


def label(name: str) -> str:
    """A scenario's label ("if batches arrived instantly"); the name itself when none is registered."""
    known = SCENARIOS.get(name)
    return known.label if known is not None else name


def gain(summary: ReplaySummary, name: str) -> float | None:
    """Baseline span / span without the cause, when the replay has that scenario."""
    scenario = next((s for s in summary.scenarios if s.name == name), None)
    if scenario is None or not summary.baseline_span_us or scenario.span_us <= 0:
        return None
    return summary.baseline_span_us / scenario.span_us

