"""The replay calibrated to the steady steps measured outside its window.

- **Tracing slows the host.** When the run's steady steps outside the window are known,
  host costs (CPU items except data waits, and launch calls) are scaled so that the replay
  as measured, without its data waits, takes the unprofiled step time less its data wait;
  data waits are scaled to the unprofiled wait per step. With data waits in the target, a
  loop paced by its loader would hide how much the tracing slowed its host.
- **In the run's own steps.** The unprofiled steps are counted by the run's step source
  (``Session.steps.source``). A window that counted another (a GAN's two optimizer steps
  per batch, where the run counts DataLoader batches) is measured in the run's steps by
  their marks in its trace: DataLoader ``__next__`` ranges, or ``Optimizer.step`` ranges.
  A window whose trace marks none of them is not calibrated.
- **Which steps the window stands for.** A window holds a few consecutive steps. Work
  that comes back less often (an epoch's end: checkpoints, images, evaluation; an epoch's
  start: loader workers started again) is in the unprofiled mean but not in those steps.
  Tracing only slows a step: an unprofiled step that spent longer on the host than the
  window's longest step did, as traced (scaled up by the unprofiled steps' median over
  the window's, when the unprofiled steps were longer across the board), holds work the
  window did not see. Those steps, waits included, are left out of the calibration's
  targets; what they add to the mean step (``ReplaySummary.unrepresented_us``) is the
  same in every what-if: the gain of a what-if is (window + that) / (what-if + that). A
  represented step never takes less than the GPU's work per step: where the other steps
  were shorter, the host ran ahead and the long ones paid for the queue, which the
  replayed GPU already holds. Without marks of the run's steps in the trace, every step
  counts as represented (said so).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpudoctor.collectors.kineto_names import DATA_ANNOTATION, OPTIMIZER_ANNOTATION
from gpudoctor.collectors.trace_decode import TraceIndex
from gpudoctor.metrics import UnprofiledSteps
from gpudoctor.replay.items import CPU, DATA
from gpudoctor.replay.simulate import Plan, run
from gpudoctor.replay.timeline import Timeline

MIN_HOST_SCALE = 0.2  # tracing with stacks slowed the host at most 5x in the H200 fixtures
MIN_WINDOW_STEPS = 2  # complete steps of the run's kind in the window to tell which unprofiled steps it holds
UNIT_WORDS = {"loader": "DataLoader batches", "optimizer": "optimizer steps", "backward": "backward() steps",
              "explicit": "gpudoctor.step() steps", "forward": "module forwards"}


@dataclass(frozen=True)
class Calibration:
    """How the replay of one window was calibrated (see the module's docstring)."""

    host_scale: float = 1.0
    data_scale: float = 1.0
    words: str = ""
    run_steps: float = 0.0  # the replayed part's length in the run's steps (0: not known)
    unrepresented_us: float = 0.0  # over the replayed part: steady time its steps do not stand for
    unrepresented_wait_us: float = 0.0  # the data waits in it
    unrepresented_steps: int = 0  # how many unprofiled steps held it


@dataclass(frozen=True)
class _Represented:
    """The unprofiled steps the window's steps stand for, per run step, in us."""

    step_us: float
    wait_us: float
    unrepresented_us: float = 0.0
    unrepresented_wait_us: float = 0.0
    unrepresented_steps: int = 0
    words: str = ""


def calibrate(timeline: Timeline, index: TraceIndex, steps: int, source: str | None,
              unprofiled: UnprofiledSteps | None) -> Calibration:
    """The calibration of the replay of `timeline` (built from `index`, covering `steps` steps of
    `source`, the window's step source) to the steady steps outside it."""
    if not steps or unprofiled is None or unprofiled.step_us <= 0:
        return Calibration(words="not calibrated (no steady step time outside the window): host costs as traced")
    run_steps, unit = _run_steps(index, steps, source, unprofiled.source)
    if not run_steps:
        return Calibration(words=f"not calibrated: the window counted {_unit(source)}, the run "
                                 f"{_unit(unprofiled.source)}, which its trace does not mark: host costs as traced")
    host = timeline.host
    data_items = [i for i, (kind, tag) in enumerate(zip(host.kind, host.tag)) if kind == CPU and tag == DATA]

    def gpu_per_step() -> float:
        return run(timeline, Plan.measured(timeline)).gpu_busy_us / run_steps

    represented = _represented(index, unprofiled, gpu_per_step)
    scale, data_scale, words = _scales(timeline, data_items, run_steps, unprofiled, represented)
    return Calibration(host_scale=scale, data_scale=data_scale, words=unit + words + represented.words,
                       run_steps=run_steps, unrepresented_us=represented.unrepresented_us * run_steps,
                       unrepresented_wait_us=represented.unrepresented_wait_us * run_steps,
                       unrepresented_steps=represented.unrepresented_steps)


def _unit(source: str | None) -> str:
    return UNIT_WORDS.get(source or "", source or "steps")


def _run_steps(index: TraceIndex, steps: int, source: str | None, run_source: str | None) -> tuple[float, str]:
    """(the window's length in the run's steps, how they were counted: "" when they are its own)."""
    if run_source is None or source is None or run_source == source:
        return float(steps), ""
    marks = step_marks(index, run_source)
    if marks is None or not len(marks):
        return 0.0, ""
    return float(len(marks)), (f"per step of the run ({_unit(run_source)}: {len(marks)} in the window, which "
                               f"counted {steps} {_unit(source)}): ")


def step_marks(index: TraceIndex, source: str | None) -> np.ndarray | None:
    """Where each step of `source` begins in the trace, sorted (us): the starts of DataLoader
    ``__next__`` ranges for batches, of ``Optimizer.step`` ranges for optimizer steps (their ends
    would do as well, but the window's last one stays open until the profiler stops). None for
    sources a trace does not mark."""
    if source == "loader":
        rows = _rows(index, lambda name: DATA_ANNOTATION.match(name) is not None)
    elif source == "optimizer":
        rows = _rows(index, lambda name: name.startswith(OPTIMIZER_ANNOTATION))
    else:
        return None
    return np.sort(index.ops.ts[rows].astype(float))


def _rows(index: TraceIndex, wanted: Callable[[str], bool]) -> np.ndarray:
    """The operator rows whose name is `wanted` (tested once per distinct name)."""
    ops = index.ops
    strings = index.strings.distinct
    codes = [code for code in set(ops.name.tolist()) if wanted(str(strings[code]))]
    return np.flatnonzero(np.isin(ops.name, codes)) if codes else np.array([], dtype=int)


def window_host_us(index: TraceIndex, source: str | None) -> list[float] | None:
    """The host time (not waiting for a batch) of each complete step of `source` in the trace, as
    traced; None when the trace marks too few of them."""
    marks = step_marks(index, source)
    if marks is None or len(marks) < MIN_WINDOW_STEPS + 1:
        return None
    rows = _rows(index, lambda name: DATA_ANNOTATION.match(name) is not None)
    starts = index.ops.ts[rows].astype(float)
    ends = starts + index.ops.dur[rows].astype(float)
    out = []
    for begin, end in zip(marks[:-1].tolist(), marks[1:].tolist()):
        waited = float(np.clip(np.minimum(ends, end) - np.maximum(starts, begin), 0.0, None).sum())
        out.append(max(0.0, end - begin - waited))
    return out


def _represented(index: TraceIndex, unprofiled: UnprofiledSteps, gpu_per_step: Callable[[], float]) -> _Represented:
    """The unprofiled step and wait the window's steps stand for, and the rest (`gpu_per_step`: the
    replayed GPU's busy time per run step)."""
    wait = unprofiled.wait_us or 0.0
    durations = np.asarray(unprofiled.durations_us, dtype=float)
    waits = np.asarray(unprofiled.waits_us, dtype=float)
    if not len(durations) or len(waits) != len(durations):
        return _Represented(unprofiled.step_us, wait)
    traced = window_host_us(index, unprofiled.source)
    if traced is None:
        why = ("does not mark" if step_marks(index, unprofiled.source) is None else "marks too few")
        return _Represented(unprofiled.step_us, wait, words=(
            f"; which unprofiled steps the window's stand for is not known (its trace {why} "
            f"{_unit(unprofiled.source)}): all of them counted"))
    host = durations - waits
    longest = max(traced) * max(1.0, float(np.median(host)) / max(statistics.median(traced), 1e-9))
    inside = host <= longest
    if inside.all():
        return _Represented(unprofiled.step_us, wait)
    ordinary = float(durations[inside].mean()) if inside.any() else 0.0
    gpu = gpu_per_step()
    extra = max(0.0, float(durations.mean()) - max(ordinary, gpu))
    extra_wait = min(extra, max(0.0, float(waits.mean()) - (float(waits[inside].mean()) if inside.any() else 0.0)))
    if extra <= 0.0:
        return _Represented(unprofiled.step_us, wait)
    held = (f"{extra / 1e3:.3g} ms per step" if ordinary >= gpu else
            f"{extra / 1e3:.3g} ms per step beyond the GPU's work per step ({gpu / 1e3:.3g} ms), which the other "
            "steps took less than (the host ran ahead, and the long steps paid for the queue)")
    return _Represented(
        max(0.0, unprofiled.step_us - extra), max(0.0, wait - extra_wait), extra, extra_wait, int((~inside).sum()),
        words=(f"; {int((~inside).sum())} of {len(host)} steady steps outside the window spent longer on the host "
               f"than its longest step ({longest / 1e3:.3g} ms): work its steps do not hold (the loop's periodic "
               f"or occasional work: an epoch's end or start, a checkpoint, an evaluation, a pause), {held}"
               + (f" ({extra_wait / 1e3:.3g} ms of it data waits)" if extra_wait > 0 else "")
               + ", left out of the calibration and added unchanged to every what-if"))


def _scales(timeline: Timeline, data_items: list[int], steps: float, unprofiled: UnprofiledSteps,
            represented: _Represented) -> tuple[float, float, str]:
    """(host scale, data-wait scale, how they were chosen), to the represented steps."""
    host = timeline.host
    window_wait = sum(host.dur[i] for i in data_items)
    step_us, wait_us = represented.step_us, (represented.wait_us if unprofiled.wait_us is not None else None)
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
        return 1.0, data_scale, (f"host costs as traced: the replay takes {full / steps / 1e3:.3g} ms per step "
                                 f"against {target / steps / 1e3:.3g} ms, {what}{waits}")
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
