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
    A step is ``compute + data wait``. If the wait vanished, the same run would go
    ``1 / (1 - share)`` times faster: that is the estimated gain reported (an upper
    bound, reached only if the data arrives for free). Until the wait is gone, a
    bigger batch, faster kernels or a faster GPU mostly lengthen the wait.

How it is measured
    The agent times every ``__next__`` call of every DataLoader iterator (the wait)
    and every step boundary (optimizer steps, loader batches or ``gpudoctor.step()``).
    The share is the total wait divided by the total step time over the steady steps
    (warm-up excluded); without step records it falls back to the loader's total wait
    over the run's duration. Where batches are produced (in each worker process, or
    in the main process when ``num_workers=0``) the agent records the wall time and
    the CPU time of the fetching thread per batch; their ratio classifies the stall.
    psutil's CPU share of the worker processes (when sampled) confirms it.

Thresholds, and where they come from
    - share >= 5%: a finding (warning). This is the TensorBoard profiler plugin's
      line for "your program is input-bound"; below it, the gain (< 1.05x) is within
      run-to-run noise.
    - share >= 30%: critical. The upper-bound gain is then above 1.4x, more than
      most GPU-side changes buy on a GPU that is already fed (TF32/bf16, fused
      kernels), so the input pipeline must be fixed first; it is also the point where
      GPU-side findings stop being trustworthy, because the GPU is idle for reasons
      of its own less than a third of the time.
    - CPU time / wall time per batch >= 0.7: cpu-bound; <= 0.3: waiting; in between:
      mixed. The bands leave a margin on each side of "half the time on CPU", since
      page faults, GIL hand-offs and short I/O always cost some wall time without CPU.
    - Worker processes busy (psutil, share of min(workers, cores)) below 30% while
      the fetching thread looks CPU-bound, or above 70% while it looks idle, makes
      the classification ``mixed``.

What to do
    - cpu-bound: raise ``num_workers`` toward the usable cores (GD101 computes the
      number), make each sample cheaper (decode/resize once offline, smaller
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

from dataclasses import dataclass

from gpudoctor import metrics
from gpudoctor.model import Check, Evidence, Finding, Remedy, Skip
from gpudoctor.session import LoaderInfo, Session

WAIT_SHARE_WARNING = 0.05  # TensorBoard profiler plugin: input-bound above 5%
WAIT_SHARE_CRITICAL = 0.30  # upper-bound gain > 1.4x: fix the input pipeline first
CPU_BOUND_RATIO = 0.7  # fetch CPU time / wall time at or above: CPU-bound
WAITING_RATIO = 0.3  # at or below: waiting on I/O, network or sleep
MAX_SHARE_FOR_GAIN = 0.99  # keeps 1 / (1 - share) finite when the loop only waits
BURST_MEDIAN_SHARE = 0.5  # median wait below half the mean wait: a few long waits dominate


@dataclass(frozen=True)
class StallClass:
    """Why batches are late, from where they are produced."""

    kind: str  # cpu-bound | waiting | mixed | unknown
    fetch_cpu_ratio: float | None  # CPU time / wall time producing a batch
    workers_busy: float | None  # worker processes' CPU / min(workers, cores), 0-1
    reason: str  # one sentence with the numbers


@dataclass(frozen=True)
class InputStall:
    """The data-wait numbers every stage-1 check reads."""

    share: float  # data wait / step time
    window: str
    steps: metrics.StepSummary | None  # None when only loader totals were available
    loader: LoaderInfo | None  # the loader the loop waited on most
    stall: StallClass

    @property
    def significant(self) -> bool:
        return self.share >= WAIT_SHARE_WARNING

    @property
    def gain(self) -> float:
        return 1.0 / (1.0 - min(self.share, MAX_SHARE_FOR_GAIN))

    @property
    def compute_per_step_s(self) -> float | None:
        """Mean step time minus mean data wait: what the loop does besides waiting."""
        if self.steps is None:
            return None
        return (1.0 - self.share) / self.steps.steps_per_s


def batches_per_step(session: Session, loader: LoaderInfo) -> int:
    """Batches the loop consumes per step (>1 with gradient accumulation)."""
    if session.steps.source == "loader" or session.steps.count <= 0 or loader.batches <= 0:
        return 1
    return max(1, round(loader.batches / session.steps.count))


def workers_busy(session: Session, loader: LoaderInfo) -> float | None:
    """Share of the workers' CPU capacity they used in steady state (psutil), 0-1."""
    if loader.num_workers <= 0:
        return None
    values = [s.workers_percent for s in metrics.cpu_samples_steady(session) if s.workers_percent is not None]
    busy = metrics.mean(values)
    if busy is None:
        return None
    # oversubscribed workers cannot each get a core: measure against what they could get
    cores = metrics.usable_cores(session)
    capacity = min(loader.num_workers, cores) if cores else loader.num_workers
    return max(0.0, min(1.0, busy / (100.0 * capacity)))


def classify_stall(session: Session, loader: LoaderInfo | None) -> StallClass:
    if loader is None:
        return StallClass("unknown", None, None, "no loader produced batches")
    ratio = metrics.fetch_cpu_ratio(loader)
    busy = workers_busy(session, loader)
    where = "in the main process" if loader.num_workers == 0 else f"in {loader.num_workers} worker(s)"
    busy_text = f", worker processes {busy:.0%} busy" if busy is not None else ""
    if ratio is None:
        if busy is None:
            return StallClass("unknown", None, None, "the cost of producing a batch was not measured")
        kind = "cpu-bound" if busy >= CPU_BOUND_RATIO else "waiting" if busy <= WAITING_RATIO else "mixed"
        return StallClass(kind, None, busy, f"worker processes were {busy:.0%} busy (per-batch cost not measured)")
    text = f"producing a batch {where} used CPU {ratio:.0%} of its wall time{busy_text}"
    if ratio >= CPU_BOUND_RATIO:
        if busy is not None and busy <= WAITING_RATIO:
            return StallClass("mixed", ratio, busy, text + ": CPU-bound per batch, yet the workers are mostly idle")
        return StallClass("cpu-bound", ratio, busy, text)
    if ratio <= WAITING_RATIO:
        if busy is not None and busy >= CPU_BOUND_RATIO:
            # thread CPU time misses work done in the workers' other threads (decoder pools)
            return StallClass("mixed", ratio, busy,
                              text + ": the fetching thread waits, other worker threads burn CPU")
        return StallClass("waiting", ratio, busy, text)
    return StallClass("mixed", ratio, busy, text)


def input_stall(session: Session) -> InputStall | None:
    """The measured data wait of the run, or None when nothing measured it."""
    summary = metrics.step_summary(session)
    share = metrics.loader_wait_share(session)
    if share is None:
        return None
    loader = metrics.main_loader(session)
    window = summary.window if summary else "whole run (loader totals)"
    return InputStall(share, window, summary, loader, classify_stall(session, loader))


TITLES = {
    "cpu-bound": "Input pipeline stall: CPU-bound preprocessing cannot keep up",
    "waiting": "Input pipeline stall: the loader waits on storage, network or sleep",
    "mixed": "Input pipeline stall: batches are late, partly CPU work, partly waiting",
    "unknown": "Input pipeline stall: the loop waits for data",
}

# B is the batch size, W the worker count GD101 computes from the same measurements
REMEDIES = {
    "cpu-bound": Remedy(
        text="Batch production is CPU work: add workers up to the usable cores (GD101 gives the number) "
        "and make each sample cheaper: decode/resize once offline, use smaller inputs or a faster "
        "decoder, and run random augmentation on the GPU on whole batches.",
        code="loader = DataLoader(dataset, batch_size=B, num_workers=W, pin_memory=True, persistent_workers=True)\n"
        "for x, y in loader:\n"
        "    x = gpu_augment(x.to(\"cuda\", non_blocking=True))  # e.g. torchvision.transforms.v2 on CUDA tensors",
    ),
    "waiting": Remedy(
        text="Batch production mostly waits: stage the dataset on local NVMe or in RAM (/dev/shm), pack "
        "small files into shards read sequentially (WebDataset/tar, LMDB, Parquet), and keep more reads in "
        "flight with more workers and a deeper prefetch (see GD104).",
        code="loader = DataLoader(dataset, batch_size=B, num_workers=W, prefetch_factor=4,\n"
        "                    persistent_workers=True, pin_memory=True)",
    ),
    "mixed": Remedy(
        text="Batches cost both CPU and waiting: first add workers (GD101) and a deeper prefetch to overlap "
        "the waits, then profile one worker's __getitem__ to see which part dominates.",
        code="loader = DataLoader(dataset, batch_size=B, num_workers=W, prefetch_factor=4, persistent_workers=True)",
    ),
    "unknown": Remedy(
        text="Add DataLoader workers so batches are produced while the GPU computes (GD101), and check "
        "where __getitem__ spends its time (decode, augmentation, reads).",
        code="loader = DataLoader(dataset, batch_size=B, num_workers=W, pin_memory=True, persistent_workers=True)",
    ),
}


def _remedy(kind: str, loader: LoaderInfo | None) -> Remedy:
    """The kind's remedy, with the loader's own batch size filled in when known."""
    remedy = REMEDIES[kind]
    code = remedy.code or ""
    if loader is not None and loader.batch_size:
        code = code.replace("batch_size=B", f"batch_size={loader.batch_size}")
    if "num_workers=W" in code:
        code = "# W: the num_workers GD101 computes from this run's measurements\n" + code
    return Remedy(text=remedy.text, code=code or None)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def run(session: Session) -> list[Finding]:
    if not session.loaders:
        raise Skip("no DataLoader seen")
    found = input_stall(session)
    if found is None:
        raise Skip("neither step times nor loader wait were measured")
    if not found.significant:
        return []
    share, stall, loader = found.share, found.stall, found.loader
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
                         "so the waits come in bursts: the prefetch queue runs dry every few steps")
        per_step += ")"
    if loader is not None:
        evidence["num_workers"] = Evidence(loader.num_workers, "workers", None, f"DataLoader {loader.loader_id}")
        fetch = metrics.fetch_time_per_batch(loader)
        if fetch is not None:
            where = "main process" if loader.num_workers == 0 else "per worker"
            evidence["fetch_time_per_batch"] = Evidence(_ms(fetch), "ms", f"whole run, {where}",
                                                        "time to produce one batch")
    if stall.fetch_cpu_ratio is not None:
        evidence["fetch_cpu_ratio"] = Evidence(round(stall.fetch_cpu_ratio, 2), "CPU s / wall s", "whole run",
                                               "CPU time / wall time producing a batch")
    if stall.workers_busy is not None:
        evidence["workers_busy"] = Evidence(round(stall.workers_busy * 100, 1), "%", found.window,
                                            "worker processes' CPU use")
    gpu_util = metrics.gpu_metric_mean(metrics.gpu_samples_steady(session), "util_percent")
    if gpu_util is not None:
        evidence["gpu_util"] = Evidence(round(gpu_util, 1), "%", found.window, "GPU utilization (mean)")
    severity = "critical" if share >= WAIT_SHARE_CRITICAL else "warning"
    message = (f"The loop waited for data {share:.0%} of each step over {found.window}{per_step}. "
               f"Stall: {stall.kind} ({stall.reason}).{_capacity_note(session, found)} "
               f"If batches arrived for free, steps would be up to {found.gain:.2f}x faster.")
    return [Finding(severity=severity, title=TITLES[stall.kind], message=message, evidence=evidence,
                    remedy=_remedy(stall.kind, loader), estimated_gain=found.gain)]


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


CHECK = Check(
    id="GD102",
    slug="input-stall",
    stage=1,
    title="Input pipeline stall",
    run=run,
    requires=("loader",),
    doc=__doc__ or "",
)
