"""GD202 batch-headroom: the batch uses a small part of GPU memory while the GPU idles.

What it detects
    Peak memory is far below the device and the GPU is not busy: a larger batch
    would fit and would give the GPU more work per step. The finding estimates the
    largest batch that fits and gives the exact ``gpudoctor sweep`` command that
    measures throughput from half of that bound upward (playbook step 2).

Why it matters
    A GPU is a long assembly line: a small batch leaves most stations idle.
    Throughput grows with batch size along a curve that flattens (the knee) and
    then falls or fails when memory runs out. Raising the batch is the cheapest lever,
    but not the first one (fix the input pipeline first, stage 1), and not "bigger is
    better": memory capacity and, for online serving, the latency budget (P50) set
    the ceiling. Gains are not linear: the finding predicts samples per second at each
    multiple of the batch (2x, 4x, ... up to what memory allows) from a model of the
    measured step (gpudoctor.analysis.batch_scaling): the host's launches and Python do
    not grow with the batch, kernels grow with the share of the SMs they fill (GPM SM
    activity over duty cycle), copies and the samples' own loading grow with it (with
    num_workers=0, the fetcher's share of the loop's wait; the iterator, sampler and pinning
    are once per batch); the work of each epoch's end and start that the profiled window's
    steps do not hold (checkpoints, saved images, workers started again, each epoch's first
    batch made from scratch) stays the same per sample, so a bigger batch does not shorten it,
    where the long steps that hold it come back with the epochs (else they are pauses, the
    same per step). Its gain is the
    one at the multiple it names: the curve's knee (doubling buys under 5%), at most where
    the sweep starts. The sweep measures the real curve.

How it is measured
    From PyTorch's caching allocator (``torch.cuda.memory_stats``) recorded by the
    agent: the peak allocated bytes (``max_memory_allocated``) and the allocated
    bytes at each snapshot; the batch size from ``Session.batch_size`` or the main
    DataLoader; the device size from ``mem_get_info`` or NVML; GPU activity from
    the steady NVML/GPM samples (GD201).

    Estimate (stated in the finding, because it is one): memory that does not grow
    with the batch (weights, gradients, optimizer state) is taken as the lowest
    allocation seen at a snapshot (``baseline``); the rest of the peak scales with the
    batch: ``per_sample = (peak - baseline) / batch``. When the snapshots show no
    difference, everything is assumed to scale (``per_sample = peak / batch``),
    which under-estimates the bound. A snapshot taken before the optimizer state
    existed lowers the baseline the same way: the estimate errs on the safe side.
    ``max_batch = (0.9 * device - baseline) / per_sample``.

Thresholds, and where they come from
    - peak (allocated or reserved, whichever is larger) < {{PEAK_SHARE_MAX}} of the device: room
      for at least about twice the batch; above it, the sweep would find little.
    - usable memory = {{USABLE_SHARE}} of the device: peak above 90% of the device is close to
      OOM (kernel workspaces, fragmentation and the CUDA context live there).
    - the GPU counts as busy (no finding) at SM activity >= {{BUSY_SM_ACTIVITY}}, or, without GPM,
      utilization >= {{BUSY_DUTY_CYCLE}}: a busy GPU gains little from a bigger batch.
    - start = half of the bound (playbook: "start measuring at half that bound and
      climb to the stable edge"), rounded down to a multiple of 8 for tensor cores.
    - warning when the GPU's busy share is below {{BUSY_WARNING}} (GD201's line), info otherwise.
    - no finding after an out-of-memory (GD402) or when the bound is under twice the
      batch.
    - without a known batch size (no DataLoader), in multiples of today's samples per step,
      and only where a bigger batch is the remedy: the GPU idles (busy below {{BUSY_WARNING}}) and
      twice the batch is predicted nearly twice the samples per second (at least 2 / {{KNEE_GROWTH}}:
      below the knee, the step is its fixed costs); a warning at most.
    - severity follows the predicted gain, as for every finding (1.053x a warning, 1.43x critical).

What to do
    Run the sweep it prints; read throughput *and* P50 step latency per batch size;
    take the knee (throughput grows < 5% per step up). Scale the learning rate with
    the batch (linear or square-root rule, with warm-up) so convergence holds.

Example
    ``gpudoctor sweep train.py:build --mode train --batch-sizes 192,384,768``
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.batch_scaling import KNEE_GROWTH, BatchScaling, batch_scaling
from gpudoctor.analysis.gpu_state import GpuActivity, in_words
from gpudoctor.analysis.memory import gpu_memory_total
from gpudoctor.analysis.prediction import Prediction, severity_for
from gpudoctor.analysis.shared import analyses
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check
from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:
    from gpudoctor.session import AllocatorSnapshot, Session

PEAK_SHARE_MAX = Threshold(
    "peak memory below this share of the device: headroom", 0.50, "share",
    "gpudoctor: room for about twice the batch; above it a sweep finds little")
USABLE_SHARE = Threshold(
    "usable share of device memory", 0.90, "share",
    "peak above 90% of the device is close to OOM (kernel workspaces, fragmentation, the CUDA "
    "context)")
BUSY_SM_ACTIVITY = Threshold(
    "SM activity of a GPU already busy (GPM)", 80.0, "%",
    "DCGM: 80% SM activity is effective use")
BUSY_DUTY_CYCLE = Threshold(
    "duty cycle of a GPU already busy (without GPM)", 90.0, "%",
    "gpudoctor: a kernel ran nearly all the time")
BUSY_WARNING = Threshold(
    "busy share below this: a warning, else a note", 50.0, "%",
    "TensorBoard profiler plugin's 50% line, as GD201")
MIN_SCALING_SHARE = Threshold(
    "peak - baseline below this share of the peak: no batch-dependent part measured", 0.02, "share",
    "gpudoctor: within allocator noise")
GIB = 2**30


def batch_size(session: Session) -> int | None:
    if session.batch_size:
        return session.batch_size
    loader = metrics.main_loader(session)
    return loader.batch_size if loader is not None and loader.batch_size else None


def device_total(session: Session, snapshots: list[AllocatorSnapshot]) -> int | None:
    for snap in snapshots:
        if snap.device_total_bytes:
            return snap.device_total_bytes
    return gpu_memory_total(session)


def round_start(bound: int, batch: int) -> int:
    """Half the bound, rounded down to a multiple of 8 when large enough, above the current batch."""
    start = bound // 2
    if start >= 16:
        start -= start % 8
    if start <= batch:
        start = min(2 * batch, bound)
    return max(1, start)


def script_target(command: list[str]) -> str:
    """`train.py:build` from the recorded command, or a placeholder."""
    for i, arg in enumerate(command):
        if arg.endswith(".py"):
            return f"{os.path.basename(arg)}:build"
        if arg == "-m" and i + 1 < len(command):
            return f"{command[i + 1]}:build"
    return "<your_module>.py:build"


@check("GD202", "batch-headroom", stage=2, title="Batch far below what memory allows",
       requires=("allocator",), explains=("GD301", "GD201"),
       fix=Fix(untried="the batch size belongs to the code (memory, learning rate, convergence): measure the curve "
               "with `gpudoctor sweep`"))
def run(session: Session) -> list[Finding]:
    if analyses(session).oom_seen:
        raise Skip("the run hit out-of-memory (see GD402): there is no headroom to recommend")
    batch = batch_size(session)
    snapshots = [s for s in session.allocator if s.label != "oom"]
    if not snapshots:
        raise Skip("no allocator snapshot")
    total = device_total(session, snapshots)
    if not total:
        raise Skip("device memory size unknown")
    peak = max(s.max_allocated_bytes for s in snapshots)
    footprint = max(peak, max(s.max_reserved_bytes for s in snapshots))
    if peak <= 0:
        raise Skip("no allocation recorded")
    if footprint >= PEAK_SHARE_MAX * total:
        return []
    act = analyses(session).gpu_activity
    busy, busy_name = _busy(act)
    if busy is not None and busy >= (BUSY_SM_ACTIVITY if busy_name == "SM activity" else BUSY_DUTY_CYCLE):
        return []
    memory = _memory(snapshots, peak, total)
    if memory.max_multiple < 2:
        return []
    model = batch_scaling(session, memory.max_multiple)
    if batch is None and model is None:
        raise Skip("batch size unknown (no DataLoader batch_size, Session.batch_size not set) and no steady step "
                   "time to predict a bigger batch from")
    if batch is None and not _fixed_cost_bound(busy, model):
        return []
    return [_finding(session, batch, memory, model, peak, footprint, total, busy, busy_name,
                     act.window if act is not None else "whole run")]


def _fixed_cost_bound(busy: float | None, model: BatchScaling | None) -> bool:
    """Without the batch size, a bigger one is the remedy only where the step is its fixed costs: the GPU
    idles (busy below GD201's 50% line: more work per step) and twice the samples per step are predicted
    nearly twice the samples per second (below the knee: the step barely grows, its time is the host's
    launches and Python)."""
    if busy is None or busy >= BUSY_WARNING or model is None:
        return False
    return model.gain(2) >= 2 / KNEE_GROWTH


@dataclass(frozen=True)
class _Memory:
    baseline: float  # bytes that do not grow with the batch
    scaling: float  # bytes that grow with it, at today's batch
    max_multiple: float  # the largest multiple of the batch that fits in the usable memory
    assumed_all_scales: bool


def _memory(snapshots: list[AllocatorSnapshot], peak: int, total: int) -> _Memory:
    baseline = float(min(s.allocated_bytes for s in snapshots))
    scaling = peak - baseline
    assumed_all_scales = scaling < MIN_SCALING_SHARE * peak
    if assumed_all_scales:
        baseline, scaling = 0.0, float(peak)
    return _Memory(baseline, scaling, (USABLE_SHARE * total - baseline) / scaling, assumed_all_scales)


def recommended_multiple(model: BatchScaling, start_multiple: float) -> float:
    """Where the model's curve reaches its knee, but no further than where the sweep starts
    (half the memory bound: the playbook's "start measuring at half that bound")."""
    knee = model.knee()
    return max(1.0, min(knee, start_multiple) if knee is not None else start_multiple)


def _finding(session: Session, batch: int | None, memory: _Memory, model: BatchScaling | None, peak: int,
             footprint: int, total: int, busy: float | None, busy_name: str, window: str) -> Finding:
    target = script_target(session.command)
    if batch is not None:
        bound = math.floor((USABLE_SHARE * total - memory.baseline) / (memory.scaling / batch))
        start = round_start(bound, batch)
        start_multiple = start / batch
    else:
        bound = start = 0
        start_multiple = float(2 ** max(1, math.floor(math.log2(memory.max_multiple / 2)))) \
            if memory.max_multiple >= 4 else 2.0
    prediction = None
    multiple = None
    if model is not None:
        multiple = recommended_multiple(model, start_multiple)
        prediction = _prediction(model, multiple, batch)
    evidence = _evidence(batch, memory, peak, footprint, total, bound, start, busy, busy_name, window, model,
                         multiple)
    message = _message(batch, peak, footprint, total, memory, bound, start, busy, busy_name, window)
    if model is not None and prediction is not None and multiple is not None:
        message += " " + _prediction_text(model, multiple, batch, prediction)
    if prediction is not None:
        severity = severity_for(prediction.gain)
    else:
        severity = "warning" if busy is not None and busy < BUSY_WARNING else "info"
    if batch is None:
        # the batch was not seen: the multiple applies to whatever sets the samples per step, and a
        # model's curve over an unseen batch is a note beside the run's causes, never one that explains
        # them (a launch-bound loop stays GD301's, with a bigger batch as another way out)
        severity = "info"
    if batch is not None:
        sizes = [start, 2 * start, 4 * start]
        code = f"gpudoctor sweep {shlex.quote(target)} --mode train --batch-sizes {','.join(map(str, sizes))}"
        title = f"Batch size {batch} uses {footprint / total:.0%} of GPU memory: about {bound} would fit"
        if prediction is not None and multiple is not None:
            title += f"; batch {round(batch * multiple)} predicted {prediction.gain:.2f}x the samples/s"
    else:
        pick = f"{multiple:g}" if multiple is not None else "2"
        code = (f"batch_size = {pick} * B  # B: the samples per step today; the model's pick, measured with\n"
                f"# gpudoctor sweep {shlex.quote(target)} --mode train --batch-sizes <B*{pick}/2>,<B*{pick}>,"
                f"<B*{pick}*2>")
        gain = f" predicted {prediction.gain:.2f}x the samples/s" if prediction is not None else ""
        title = (f"More samples per step: {pick}x the batch{gain} (about {memory.max_multiple:.0f}x would fit in "
                 "GPU memory)")
    remedy = Remedy(
        text=f"Measure before changing the run: the sweep runs a few steps at each batch size and reports "
        f"throughput, P50 step latency and peak memory. `{target.split(':')[0]}` must define "
        f"`build(batch_size)` (see `gpudoctor sweep --help`). The last size deliberately probes past the "
        "estimate to find the memory edge. Take the knee (throughput grows < 5% per step up), and scale the "
        "learning rate with the batch (linear or square-root rule, with warm-up).",
        code=code,
    )
    return Finding(severity=severity, title=title, message=message, evidence=evidence, remedy=remedy,
                   prediction=prediction)


def _prediction(model: BatchScaling, multiple: float, batch: int | None) -> Prediction:
    gain = model.gain(multiple)
    at = f"{multiple:g}x the batch" + (f" ({round(batch * multiple)} samples per step)" if batch else "")
    detail = ("samples/s at m times the batch over now, m * T(1) / T(m), T(m) the slowest of the host (launches, "
              "Python: the same at any batch), the GPU (kernels grown by the share of the SMs they fill, copies "
              "by m) and the loader: " + "; ".join(model.sources))
    if model.max_multiple is not None:
        detail += f"; memory allows about {model.max_multiple:.0f}x"
    return Prediction(gain=gain, method="model", label=f"at {at}", detail=detail, step_time_s=model.step_s,
                      predicted_step_time_s=model.step_s / gain if gain > 0 else None,
                      batch_curve=model.curve(), batch_multiple=multiple)


def _prediction_text(model: BatchScaling, multiple: float, batch: int | None, prediction: Prediction) -> str:
    table = ", ".join(f"{m:g}x: {g:.2f}x" for m, g in model.curve())
    at = f"{multiple:g}x the batch" + (f" ({round(batch * multiple)})" if batch else "")
    return (f"Predicted samples per second, over now, at each multiple of the batch (a model of this step, not a "
            f"measurement): {table}. At {at} the step is bound by {model.limit(multiple)}: "
            f"{prediction.gain:.2f}x the samples per second (model).")


def _busy(act: GpuActivity | None) -> tuple[float | None, str]:
    if act is None:
        return None, ""
    if act.sm_activity is not None:
        return act.sm_activity, "SM activity"
    return act.duty_cycle, "utilization"


def _message(batch: int | None, peak: int, footprint: int, total: int, memory: _Memory, bound: int, start: int,
             busy: float | None, busy_name: str, window: str) -> str:
    fmt = metrics.format_bytes
    baseline = memory.baseline
    at = f"At batch size {batch}" if batch else "At this batch (its size was not seen: no DataLoader)"
    text = (f"{at}, PyTorch's peak allocation was {fmt(peak)} (footprint {fmt(footprint)}, "
            f"{footprint / total:.0%} of the {fmt(total)} device)")
    text += f", while the GPU's {busy_name} averaged {busy:.3g}% over {in_words(window)}. " if busy is not None else \
        " (GPU activity was not measured). "
    if batch is None:
        return text + _multiple_text(memory)
    per_sample = memory.scaling / batch
    if memory.assumed_all_scales:
        text += (f"The snapshots show no batch-independent part, so all of it is assumed to grow with the batch: "
                 f"{fmt(per_sample)} per sample. That over-counts (weights, gradients and optimizer state do "
                 "not grow with the batch), so the bound below is conservative. ")
    else:
        text += (f"Memory that does not grow with the batch (weights, gradients, optimizer state; taken as the "
                 f"lowest allocation seen, {fmt(baseline)}) leaves about {fmt(per_sample)} per sample. ")
    text += (f"Keeping 10% of the device free, about {bound} samples per batch would fit: an estimate, assuming "
             f"activation memory grows linearly with the batch. Start measuring at half of that, {start}, and "
             "climb to the stable edge. For online serving, the latency budget caps the batch, not memory.")
    return text


def _multiple_text(memory: _Memory) -> str:
    fmt = metrics.format_bytes
    if memory.assumed_all_scales:
        part = (f"The snapshots show no batch-independent part, so all {fmt(memory.scaling)} is assumed to grow with "
                "the batch (conservative). ")
    else:
        part = (f"Memory that does not grow with the batch (taken as the lowest allocation seen, "
                f"{fmt(memory.baseline)}) leaves {fmt(memory.scaling)} that does. ")
    return part + (f"Keeping 10% of the device free, about {memory.max_multiple:.0f} times today's samples per step "
                   "would fit: an estimate, assuming activation memory grows linearly with the batch. For online "
                   "serving, the latency budget caps the batch, not memory.")


def _evidence(batch: int | None, memory: _Memory, peak: int, footprint: int, total: int, bound: int, start: int,
              busy: float | None, busy_name: str, window: str, model: BatchScaling | None,
              multiple: float | None) -> dict[str, Evidence]:
    evidence: dict[str, Evidence] = {}
    if batch is not None:
        evidence["batch_size"] = Evidence(batch, "samples", "whole run", "batch size")
    evidence["peak_allocated"] = Evidence(round(peak / GIB, 3), "GiB", "whole run", "max_memory_allocated")
    evidence["peak_share"] = Evidence(round(footprint / total * 100, 1), "%", "whole run",
                                      "peak (allocated or reserved) / device")
    evidence["device_total"] = Evidence(round(total / GIB, 2), "GiB", None, "device memory")
    evidence["baseline"] = Evidence(round(memory.baseline / GIB, 3), "GiB", "whole run",
                                    "memory assumed not to scale with batch")
    if batch is not None:
        evidence["per_sample"] = Evidence(round(memory.scaling / batch / 2**20, 2), "MiB", "whole run",
                                          "estimated memory per sample")
        evidence["max_batch_estimate"] = Evidence(bound, "samples", None,
                                                  "largest batch estimated to fit in 90% of the device")
        evidence["start_batch"] = Evidence(start, "samples", None, "where to start measuring (half the bound)")
    if busy is not None:
        evidence["gpu_busy"] = Evidence(round(busy, 2), "%", window, f"GPU {busy_name}, mean")
    evidence["max_multiple"] = Evidence(round(memory.max_multiple, 1), "x", None,
                                        "largest multiple of the batch estimated to fit in 90% of the device")
    if model is not None and multiple is not None:
        evidence["recommended_multiple"] = Evidence(multiple, "x", None,
                                                    "the batch multiple the model picks (its knee, at most the start)")
        evidence["sm_fill"] = Evidence(round(model.fill * 100, 1), "%", window,
                                       "share of the SMs kernels fill while they run" +
                                       ("" if model.fill_measured else " (not measured: assumed)"))
    return evidence
