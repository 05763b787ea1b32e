"""GD102 input-stall: the training loop waits for data a large share of each step.

What it detects
    The loop that consumes a DataLoader spends a measurable share of every steady
    step blocked in the loader's ``__next__``, i.e. waiting for the next batch. While
    it waits, nothing new is queued on the GPU, so the GPU idles no matter how fast
    the model is. The finding also says *why* batches are late:

    - ``cpu-bound``: producing a batch is CPU work (decode, augment, collate): the
      CPU time spent producing a batch is close to its wall time and the workers are
      busy. More workers (up to the usable cores, see GD101) or cheaper preprocessing
      help; faster storage does not.
    - ``waiting``: producing a batch is mostly *waiting* (storage, network, a sleep, a
      lock): CPU time is far below wall time and the workers sit idle. Faster or
      local storage, bigger sequential reads, and more in-flight reads help (see
      GD104); more CPU does not.
    - ``mixed``: both, or the two signals disagree (e.g. the fetching thread is idle
      but the worker processes burn CPU in their own threads).
    - ``unknown``: the per-batch production cost was not measured.

Why it matters
    While the loop blocks in ``__next__``, it queues nothing new on the GPU. Whether
    that costs anything depends on the GPU: if work queued before the wait keeps it
    busy, the wait is hidden and fixing the loader buys nothing; if the GPU runs dry,
    every millisecond of waiting is a millisecond of the step. So the gain is not
    read off the wait share: it is the step time now over the step time predicted
    with batches arriving instantly, by the profiled window replayed without its
    DataLoader waits (gpudoctor.replay; the steady time the window's steps do not
    hold, such as each epoch's end and its workers starting again, stays in both),
    never more than a host-side fix can buy
    while the GPU was busy (``1 / busy share`` of the steady steps), and
    ``1 / (1 - share)`` only when neither exists (a CPU-only run). A wait the GPU
    did not feel is reported as hidden (info), never as a stall.

How it is measured
    The agent times every ``__next__`` call of every DataLoader iterator (the wait)
    and every step boundary (optimizer steps, loader batches or ``gpudoctor.step()``).
    The share is the total wait divided by the total step time over the steady steps
    (warm-up excluded); without step records it falls back to the loader's total wait
    over the run's duration. Where batches are produced (in each worker process, or
    in the main process when ``num_workers=0``) the agent records the wall time and
    the CPU time of the fetching thread per batch; their ratio classifies the stall.
    psutil's CPU share of the worker processes (when sampled) confirms it. Once the
    loop has waited for data 5% of the time over a second, one process that makes
    batches (a worker, or the main process) runs cProfile over its next 8 batches
    (``__getitem__``, the transforms, the collate): the remedy names the function with
    the most own time (its Python plus the ``torch.*`` builtins it calls directly) and
    its share of a batch ("Normalize.forward in transforms.py:123 costs 62% of a batch").

Thresholds, and where they come from
    - share >= {{WAIT_SHARE_WARNING}}: worth a look. This is the TensorBoard profiler plugin's line for
      "your program is input-bound"; below it, the gain (< 1.05x) is within
      run-to-run noise.
    - severity by the predicted gain: {{GAIN_WARNING}} (a 5% wait removed) or more is a
      warning, {{GAIN_CRITICAL}} (a 30% wait removed) or more critical; under it the wait is
      hidden by queued GPU work (info).
    - CPU time / wall time per batch >= {{CPU_BOUND_RATIO}}: cpu-bound; <= {{WAITING_RATIO}}: waiting; in between:
      mixed. The bands leave a margin on each side of "half the time on CPU", since
      page faults, GIL hand-offs and short I/O always cost some wall time without CPU.
    - Worker processes busy (psutil, share of min(workers, cores)) below 30% while
      the fetching thread looks CPU-bound, or above 70% while it looks idle, makes
      the classification ``mixed``.

What to do
    - cpu-bound: raise ``num_workers`` to the number the measurements support (given
      in the remedy, as in GD101), make each sample cheaper (decode/resize once offline, smaller
      images, faster decoders), or move random augmentation to the GPU on whole
      batches.
    - waiting: put the data on local NVMe or in RAM, pack small files into shards
      read sequentially (WebDataset/tar, LMDB, Parquet), keep more reads in flight
      (more workers, ``prefetch_factor``), see GD104.

Example
    Bad: per-sample JPEG decode and augmentation in the main process::

        loader = DataLoader(ImageFolder(root, transform=heavy_augment), batch_size=256)

    Good: workers decode, the GPU augments whole batches::

        loader = DataLoader(ImageFolder(root, transform=decode_and_resize), batch_size=256,
                            num_workers=7, pin_memory=True, persistent_workers=True)
        for images, labels in loader:
            images = gpu_augment(images.to("cuda", non_blocking=True))
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.input_pipeline import (
    STALL_LIMITS,
    WAIT_SHARE_CRITICAL,
    WAIT_SHARE_WARNING,
    InputStall,
    WorkerPlan,
    batches_per_step,
    data_prediction,
    loader_line,
    worker_plan,
)
from gpudoctor.analysis.prediction import SEVERITY_GAINS, severity_for
from gpudoctor.analysis.shared import analyses
from gpudoctor.model import Evidence, Finding, Fix, Prediction, Remedy, Skip, check
from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:
    from gpudoctor.session import LoaderInfo, Session

BURST_MEDIAN_SHARE = Threshold(
    "median wait below this share of the mean wait: bursts", 0.5, "share",
    "gpudoctor: a few long waits dominate the mean")
__all__ = ["WAIT_SHARE_CRITICAL", "WAIT_SHARE_WARNING", "run"]


TITLES = {
    "cpu-bound": "Input pipeline stall: CPU-bound preprocessing cannot keep up",
    "waiting": "Input pipeline stall: the loader waits on storage, network or sleep",
    "mixed": "Input pipeline stall: batches are late, partly CPU work, partly waiting",
    "unknown": "Input pipeline stall: the loop waits for data",
}

# What to change, by why batches are late; the DataLoader line is built from the run's own
# loader and the worker count the measurements support (gpudoctor.analysis.input_pipeline).
REMEDY_TEXT = {
    "cpu-bound": "Batch production is CPU work: {workers} and make each sample cheaper: decode/resize once "
    "offline, use smaller inputs or a faster decoder{gpu_aug}.",
    "waiting": "Batch production mostly waits: stage the dataset on local NVMe or in RAM (/dev/shm), pack small "
    "files into shards read sequentially (WebDataset/tar, LMDB, Parquet), and keep more reads in flight: "
    "{workers} with a deeper prefetch (see GD104).",
    "mixed": "Batches cost both CPU and waiting: {workers} with a deeper prefetch to overlap the waits, then "
    "profile one worker's __getitem__ to see which part dominates.",
    "unknown": "Produce batches while the loop computes: {workers}, and check where __getitem__ spends its time "
    "(decode, augmentation, reads).",
}
NO_WORKERS_TEXT = ("Workers would not help here: {why}. Make each batch cheaper instead: index whole batches at "
                   "once (a BatchSampler with batch_size=None, so __getitem__ receives all indices of a batch and "
                   "slices tensors once) rather than per-item __getitem__ and collate.")
BATCHED_INDEXING = ("from torch.utils.data import BatchSampler, DataLoader, RandomSampler\n"
                    "# __getitem__(indices) returns a whole batch: one slice per tensor, no per-item collate\n"
                    "sampler = BatchSampler(RandomSampler(dataset), batch_size={batch}, drop_last=False)\n"
                    "loader = DataLoader(dataset, sampler=sampler, batch_size=None)")


def fetch_hotspot(loader: LoaderInfo | None) -> tuple[str, float] | None:
    """('Normalize.forward in transforms.py:123, 62% of a batch (...)', share) from the
    loader's profiled batches: the function with the most own time."""
    profile = loader.fetch_profile if loader is not None else None
    if profile is None or not profile.functions or profile.wall_s <= 0 or not profile.batches:
        return None
    top = profile.functions[0]
    share = min(1.0, top.own_s / profile.wall_s)
    where = "the main process" if profile.worker is None else f"worker {profile.worker} (pid {profile.pid})"
    called = f", called from {top.caller}" if top.caller and "torch/utils/data/" not in top.caller else ""
    text = (f"{top.name} in {top.file}:{top.line}{called}, {share:.0%} of a batch "
            f"({metrics.format_duration(top.own_s / profile.batches)} of "
            f"{metrics.format_duration(profile.wall_s / profile.batches)}; cProfile over {profile.batches} batches in "
            f"{where})")
    return text, share


def _remedy(session: Session, kind: str, loader: LoaderInfo | None, plan: WorkerPlan | None) -> Remedy:
    remedy = _base_remedy(session, kind, loader, plan)
    hotspot = fetch_hotspot(loader)
    if hotspot is None:
        return remedy
    hot = hotspot[0]
    text = remedy.text
    for plain, named in (("make each sample cheaper", f"make each sample cheaper, starting with {hot}"),
                         ("then profile one worker's __getitem__ to see which part dominates",
                          f"then make the costliest part cheaper: {hot}")):
        text = text.replace(plain, named)
    if hot not in text:
        text += f" The costliest part of making a batch: {hot}."
    return dataclasses.replace(remedy, text=text)


def _base_remedy(session: Session, kind: str, loader: LoaderInfo | None, plan: WorkerPlan | None) -> Remedy:
    gpu = bool(session.torch_cuda_used)
    batch = loader.batch_size if loader is not None and loader.batch_size else "B"
    if plan is not None and plan.handoff_bound and plan.why_not:
        return Remedy(text=NO_WORKERS_TEXT.format(why=plan.why_not), code=BATCHED_INDEXING.format(batch=batch),
                      knobs={"num_workers": "keep"})
    deeper = kind in ("waiting", "mixed")
    if plan is not None and plan.recommended is None and plan.why_not:
        workers = f"more workers would not help ({plan.why_not})"
        template = REMEDY_TEXT[kind]
        if deeper:  # the templates' "with a deeper prefetch" is for added workers
            template = template.replace(" with a deeper prefetch", "")
            if loader is not None and loader.num_workers > 0:
                workers = f"a deeper prefetch_factor on the workers there are ({workers})"
            else:
                template = template.replace(" to overlap the waits", "")
        text = template.format(workers=workers, gpu_aug=", and run random augmentation on the GPU on whole batches"
                               if gpu else "")
        return Remedy(text=text, code=None, knobs={"num_workers": "keep"})
    if plan is not None and plan.recommended is not None and loader is not None:
        workers = f"set num_workers={plan.recommended} (sized from this run's measurements)"
        code = loader_line(loader, plan.recommended, gpu=gpu, deeper_prefetch=deeper)
    else:
        workers = "add DataLoader workers up to the usable cores"
        code = (f"loader = DataLoader(dataset, batch_size={batch}, num_workers=W,  # W: up to the usable cores - 1\n"
                f"                    persistent_workers=True{', pin_memory=True' if gpu else ''})")
    if kind == "cpu-bound" and gpu:
        code += ("\nfor x, y in loader:\n"
                 "    x = gpu_augment(x.to(\"cuda\", non_blocking=True))  # e.g. torchvision.transforms.v2 on CUDA")
    gpu_aug = ", and run random augmentation on the GPU on whole batches" if gpu else ""
    return Remedy(text=REMEDY_TEXT[kind].format(workers=workers, gpu_aug=gpu_aug), code=code,
                  knobs={"num_workers": "more"})


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def _main_thread_saturated(finding: Finding) -> bool:
    """With num_workers=0 the main thread *is* the loader: its pegged core is the stall itself;
    saturated cores (other processes, too many workers) stay a root cause of their own."""
    saturation = finding.evidence.get("saturation")
    return saturation is not None and saturation.value == "main-thread"


@check("GD102", "input-stall", stage=1, title="Input pipeline stall",
       requires=("loader",), explains=("GD201", "GD202", "GD203", "GD103"),
       explains_only_if={"GD103": _main_thread_saturated},
       thresholds=(*STALL_LIMITS, *SEVERITY_GAINS), decides="data wait",
       fix=Fix("workers", scenarios=("data",)), data_wait=True)
def run(session: Session) -> list[Finding]:
    if not session.loaders:
        raise Skip("no DataLoader seen")
    found = analyses(session).input_stall
    if found is None:
        raise Skip("neither step times nor loader wait were measured")
    if not found.significant:
        return []
    share, stall, loader = found.share, found.stall, found.loader
    prediction = data_prediction(session, found)
    gain = prediction.gain if prediction is not None else found.gain
    evidence: dict[str, Evidence] = {
        "data_wait_share": Evidence(round(share * 100, 1), "%", found.window, "data wait / step time"),
        "stall_kind": Evidence(stall.kind, None, "whole run", "why batches are late"),
    }
    per_step = ""
    if found.steps is not None:
        steps = found.steps
        mean_step = 1.0 / steps.steps_per_s
        mean_wait = share * mean_step
        evidence["step_time"] = Evidence(_ms(steps.step_time_median_s), "ms", found.window, "step time (median)")
        evidence["step_time_mean"] = Evidence(_ms(mean_step), "ms", found.window, "step time (mean)")
        evidence["data_wait_per_step"] = Evidence(_ms(mean_wait), "ms", found.window, "data wait per step (mean)")
        evidence["data_wait_median"] = Evidence(_ms(steps.data_wait_median_s), "ms", found.window,
                                                "data wait per step (median)")
        per_step = (f" (a step takes {metrics.format_duration(mean_step)} on average, "
                    f"{metrics.format_duration(mean_wait)} of it waiting for data")
        if steps.data_wait_median_s < BURST_MEDIAN_SHARE * mean_wait:
            # most steps find a batch ready and a few wait long: the queue drains in bursts
            per_step += (f"; the median step waits only {metrics.format_duration(steps.data_wait_median_s)}, "
                         "so the waits come in bursts: " + ("the prefetch queue runs dry every few steps"
                                                            if loader is not None and loader.num_workers > 0 else
                                                            "a few batches take far longer to make than the rest"))
        per_step += ")"
    plan = worker_plan(session, loader, found) if loader is not None else None
    if prediction is not None and plan is not None and plan.recommended is None and plan.prediction is not None:
        # no worker count is advised, yet a user may add workers: the gain at each count goes with this
        # finding (a worker remedy is read from it), under 1x where they would make the step slower
        prediction = dataclasses.replace(prediction, worker_curve=plan.prediction.worker_curve)
    if loader is not None:
        evidence["num_workers"] = Evidence(loader.num_workers, None, f"DataLoader {loader.loader_id}",
                                           "num_workers now")
        fetch = metrics.fetch_time_per_batch(loader)
        if fetch is not None:
            where = "main process" if loader.num_workers == 0 else "per worker"
            evidence["fetch_time_per_batch"] = Evidence(_ms(fetch), "ms", f"whole run, {where}",
                                                        "time to produce one batch")
    hotspot = fetch_hotspot(loader)
    if hotspot is not None and loader is not None and loader.fetch_profile is not None:
        top = loader.fetch_profile.functions[0]
        evidence["fetch_hotspot"] = Evidence(f"{top.name} ({top.file}:{top.line})", None,
                                             f"{loader.fetch_profile.batches} profiled batches",
                                             "costliest function making a batch")
        evidence["fetch_hotspot_share"] = Evidence(round(hotspot[1] * 100, 1), "%",
                                                   f"{loader.fetch_profile.batches} profiled batches",
                                                   "its own time / batch time")
    if stall.fetch_cpu_ratio is not None:
        evidence["fetch_cpu_ratio"] = Evidence(round(stall.fetch_cpu_ratio, 2), "CPU s / wall s", "whole run",
                                               "CPU time / wall time producing a batch")
    if stall.workers_busy is not None:
        evidence["workers_busy"] = Evidence(round(stall.workers_busy * 100, 1), "%", found.window,
                                            "worker processes' CPU use")
    gpu_util = metrics.gpu_metric_mean(metrics.gpu_samples_steady(session), "util_percent")
    if gpu_util is not None:
        evidence["gpu_util"] = Evidence(round(gpu_util, 1), "%", found.window, "GPU utilization (mean)")
    severity = severity_for(gain)
    if severity == "info":
        return [_hidden(found, per_step, prediction, evidence)]
    message = (f"The loop waited for data {share:.0%} of each step over {found.window}{per_step}. "
               f"Stall: {stall.kind} ({stall.reason}).{_capacity_note(session, found)} "
               + (f"Predicted: {prediction.sentence()}." if prediction is not None else ""))
    return [Finding(severity=severity, title=TITLES[stall.kind], message=message, evidence=evidence,
                    remedy=_remedy(session, stall.kind, loader, plan), prediction=prediction,
                    estimated_gain=gain)]


def _hidden(found: InputStall, per_step: str, prediction: Prediction | None,
            evidence: dict[str, Evidence]) -> Finding:
    """A wait the GPU did not feel: queued work kept it busy while the loop blocked."""
    how = prediction.sentence() if prediction is not None else "under 1.05x"
    message = (f"The loop waited for data {found.share:.0%} of each step over {found.window}{per_step}, but the "
               f"GPU did not wait with it: work queued before the wait kept it busy. Without the wait: {how}. "
               "Nothing to fix in the loader for now; it becomes the limit once the GPU's work gets cheaper.")
    return Finding(severity="info", title="Data wait hidden by queued GPU work", message=message,
                   evidence=evidence, prediction=prediction,
                   estimated_gain=prediction.gain if prediction is not None else None)


def _capacity_note(session: Session, found: InputStall) -> str:
    """Say so when the workers could produce enough on paper: then the wait is elsewhere."""
    loader = found.loader
    if loader is None or loader.num_workers == 0:
        return ""
    fetch = metrics.fetch_time_per_batch(loader)
    compute = found.compute_per_step_s
    if not fetch or not compute or compute <= 0:
        return ""
    produced = loader.num_workers / fetch
    needed = batches_per_step(session, loader) / compute
    if produced < 2 * needed:
        return ""
    return (f" The workers could produce {produced:.1f} batches/s against {needed:.1f} needed, so the wait "
            "is probably in handing batches over (large batches pickled between processes, the pin-memory "
            "thread) or in bursts.")
