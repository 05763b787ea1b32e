"""The what-ifs: one edit of the measured timeline per cause, re-simulated.

- ``data``: every DataLoader wait gone (batches arrive instantly).
- ``sync``: the workload's synchronisations and blocking device-to-host copies no
  longer block the host (values read rarely, kept on the GPU); the operators that read the
  values keep their host cost (the remedy still dispatches one to consume each on the GPU).
- ``launch``: each chain of launches outside ``optimizer.step()`` (operators that
  launched GPU work and the Python between them, up to the next blocking call,
  data wait or long user code; one per call of the model where the trace's Python
  stacks show its ``nn.Module`` calls, what runs outside them as measured) issued as one
  captured graph: one compiled call's host cost (``rates.graph_call_us``), then the
  kernels back to back at the graph rate measured on an H200. Launch cost only: what
  fusion saves on the GPU is ``compiled``'s. This is what compiling the model buys; the
  optimizer is not part of it.
- ``compiled``: the same chains as one compiled call each that still launches kernel by
  kernel (``torch.compile``'s default mode, no CUDA graphs): the framework Python goes, a run
  of kernels other than library ones (matrix multiplies, convolutions, attention:
  ``kineto_names.library_kernel``) launches as one (what Inductor fuses), a copy's launch on
  its own; each launch and each call costs what a compiled one does (``rates.COMPILED_*``:
  a training forward, its backward under autograd's engine, a forward without one). On the
  GPU each fused run takes as long as its longest kernel (one pass over memory); library
  kernels and copies as measured. Not paired with the others: an alternative remedy of the
  launch cause, not a cause of its own.
- ``optimizer``: the same for the launches inside each ``optimizer.step()``'s update
  function (``_single_tensor_adam``, ...; the whole step in a trace without Python stacks):
  what a fused or foreach optimizer buys over per-parameter kernels. The rest of the step
  (its wrapper and hooks, ``_init_group``'s loop over the parameters) runs alike whichever
  implementation it dispatches to, and stays as measured.
- ``pinned``: host-to-device copies of 64 KiB or more from pageable memory made
  pinned and asynchronous: their bytes at the pinned rate measured in the trace, else
  the link's pinned rate in `rates` (never a ratio to the pageable copy, whose rate
  depends on the host), their calls costing the host what a launch costs in this trace.
- ``small_copies``: runs of host-to-device copies under 64 KiB (the user's loop over
  the tensors and the kernels consuming them may come between) stacked on the host
  and copied once: each later copy's whole call goes (its API call, dispatch, sync and,
  with Python stacks, the framework's Python binding around it), the first keeps its
  call and its sync and moves every byte; the user's own Python stays.
- ``tf32``: fp32 GEMM kernels at the TF32 rate (`rates.tf32_speedup`).

Calibration (gpudoctor.replay.calibration): tracing slows the host, so host costs are scaled
to the steady steps measured outside the window, in the run's own steps; the steady time
those steps do not stand for (an epoch's end and start, checkpoints) is carried beside the
spans (``ReplaySummary.unrepresented_us``) and added to every one of them by `gain`. The
window ends with its threads' last events: a record_function range the profiler's stop left
open (gpudoctor stops it inside ``optimizer.step()``) ends when the trace is collected,
4-175 ms later in the H200 fixtures; that teardown is neither a step's host cost nor part of
any what-if (replay.threads._closed_by_stop).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpudoctor.collectors.window_picture import BINS, picture_range, span_list
from gpudoctor.metrics import UnprofiledSteps
from gpudoctor.replay import edits
from gpudoctor.replay.calibration import calibrate
from gpudoctor.replay.simulate import Plan, Result, run
from gpudoctor.replay.timeline import Timeline, build
from gpudoctor.session import ReplayScenario, ReplaySummary

log = logging.getLogger(__name__)

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
    # combined with the others (ReplaySummary.combined, what the engine reads to tell a cause from its
    # consequences); an alternative remedy of the same cause (plain compile beside CUDA graphs) is not
    paired: bool = True


def replay_trace(events: Any, steps: int = 0, unprofiled: UnprofiledSteps | None = None, *,
                 source: str | None = None, scenarios: Iterable[Scenario] | None = None) -> ReplaySummary | None:
    """Replay one trace's events: the measured window and each applicable what-if.

    `steps`: the window's steps, marked by `source` (ProfileSummary.step_source; None: the
    run's own). `unprofiled`: the steady steps outside the window, which calibrate the replay
    when the run measured them (gpudoctor.replay.calibration). `scenarios`: the what-ifs to
    replay; None: the registered ones (SCENARIOS), in their order.
    """
    known = {s.name: s for s in (SCENARIOS.values() if scenarios is None else scenarios)}
    from gpudoctor.collectors.trace_decode import index_events
    from gpudoctor.replay.window import latest_stretch

    began = time.perf_counter()
    index, steps, scope = latest_stretch(index_events(events), steps)
    timeline = build(index)
    if timeline is None:
        return None
    if len(timeline.host) + len(timeline.ops) > MAX_ITEMS:
        return ReplaySummary(steps=steps, scope=scope, measured_span_us=round(timeline.measured_span_us, 3),
                             error=f"the window holds {len(timeline.host) + len(timeline.ops):,} host items and "
                                   "GPU operations: too many to replay")
    calibration = calibrate(timeline, index, steps, source, unprofiled)
    measured = Plan.measured(timeline, calibration.host_scale, calibration.data_scale)
    drawn = _drawn_items(timeline, picture_range(index))
    base = run(timeline, measured, record=True, starts_of=drawn or ())
    summary = ReplaySummary(
        steps=steps,
        scope=scope,
        measured_span_us=round(timeline.measured_span_us, 3),
        baseline_span_us=round(base.span_us, 3),
        baseline_gpu_busy_us=round(base.gpu_busy_us, 3),
        baseline_kernel_busy_us=round(base.kernel_busy_us, 3),
        host_scale=round(calibration.host_scale, 4),
        data_scale=round(calibration.data_scale, 4),
        calibration=calibration.words,
        run_steps=round(calibration.run_steps, 3),
        unrepresented_us=round(calibration.unrepresented_us, 3),
        unrepresented_wait_us=round(calibration.unrepresented_wait_us, 3),
        unrepresented_steps=calibration.unrepresented_steps,
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
        result = run(timeline, plan, record=True, starts_of=drawn or ())
        plans[name] = plan
        drawn_spans, drawn_bins, drawn_span = _picture(timeline, result, drawn)
        summary.scenarios.append(ReplayScenario(name=name, label=scenario.label, span_us=round(result.span_us, 3),
                                                gpu_busy_us=round(result.gpu_busy_us, 3),
                                                kernel_busy_us=round(result.kernel_busy_us, 3), changed=changed,
                                                detail=detail, picture=drawn_spans, picture_bins=drawn_bins,
                                                picture_span_us=drawn_span))
    useful = [s.name for s in summary.scenarios if known[s.name].paired
              and base.span_us / max(s.span_us, 1e-9) >= MIN_GAIN_FOR_PAIRS]
    for i, first in enumerate(useful):
        for second in useful[i + 1:]:
            plan = plans[first].copy()  # the first edit made on the measured plan: as its scenario's
            known[second].edit(timeline, plan)
            summary.combined[f"{first}+{second}"] = round(run(timeline, plan).span_us, 3)
    summary.seconds = round(time.perf_counter() - began, 3)
    return summary


def _drawn_items(timeline: Timeline, drawn: tuple[float, float, list[float]]) -> tuple[int, int] | None:
    """The main thread's first item in the steps a report draws (collectors.window_picture.picture_range) and
    its first item after them (len(items): none), by position in timeline.host."""
    t0, t1, _ = drawn
    times, threads = timeline.host.ts, timeline.host.thread  # in measured order

    def first_main(at: float) -> int:
        i = bisect.bisect_left(times, at)
        while i < len(times) and threads[i] != timeline.main_thread:
            i += 1
        return i

    first = first_main(t0)
    return (first, first_main(t1)) if first < len(times) else None


def _picture(timeline: Timeline, result: Result,
             bounds: tuple[int, int] | None) -> tuple[list[float], list[float], float | None]:
    """The GPU's replayed work in the steps a report draws: from the replayed start of the main
    thread's first item in them to that of its first item after (`bounds`, _drawn_items)."""
    if bounds is None or result.op_starts is None or result.op_ends is None:
        return [], [], None
    first, after = bounds
    begin = result.item_starts[first]
    end = result.item_starts[after] if after < len(timeline.host) else timeline.start + result.span_us
    if end <= begin:
        return [], [], None
    return (*span_list(result.op_starts, result.op_ends, begin, end, (end - begin) / BINS), round(end - begin, 1))


def replay_or_error(events: Any, steps: int = 0, unprofiled: UnprofiledSteps | None = None, *,
                    source: str | None = None) -> ReplaySummary | None:
    """replay_trace that never raises: a model that cannot be built is reported, not fatal."""
    try:
        return replay_trace(events, steps, unprofiled, source=source)
    except Exception as exc:  # the statistics and every other check still stand
        log.debug("replay failed", exc_info=True)
        return ReplaySummary(steps=steps, error=f"the window could not be replayed: {type(exc).__name__}: {exc}")


# the built-in what-ifs, in the order they are replayed and reported
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("data", "if batches arrived instantly", edits.data),
    Scenario("sync", "if the host never waited for the GPU", edits.sync),
    Scenario("launch", "if the model's launch chains were captured graphs", edits.launch),
    Scenario("compiled", "if the model were compiled without CUDA graphs", edits.compiled, paired=False),
    Scenario("optimizer", "if each optimizer step were a few fused kernels", edits.optimizer),
    Scenario("pinned", "if pageable copies were pinned and asynchronous", edits.pinned),
    Scenario("small_copies", "if small copies were stacked into one", edits.small_copies),
    Scenario("tf32", "if fp32 matmuls ran on TF32 tensor cores", edits.tf32),
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
    """The loop's time now over its time without the cause, when the replay has that scenario:
    (baseline span + the time the window's steps do not stand for) / (the scenario's + the same)."""
    scenario = next((s for s in summary.scenarios if s.name == name), None)
    if scenario is None or not summary.baseline_span_us or scenario.span_us <= 0:
        return None
    return summary.loop_us(summary.baseline_span_us) / summary.loop_us(scenario.span_us)

