"""The input pipeline's numbers: data wait, why batches are late, and what workers would buy.

Shared by GD101 (workers), GD102 (input stall), GD103 (CPU saturation) and GD104
(storage). Constants and where they come from:

- data wait >= 5% of the step is worth a look (TensorBoard profiler plugin's
  "input-bound" line); 30% is critical (the upper-bound gain is then above 1.4x);
- fetch CPU time / wall time >= 0.7: CPU-bound; <= 0.3: waiting (I/O, network,
  sleeps); a margin either side of one half, since page faults and GIL hand-offs
  always cost some wall time without CPU;
- a worker hands each batch over through shared memory and a queue: the consuming
  loop pays that hand-off (unpickling the batch, rebuilding its tensors) instead
  of producing the batch itself, or, with pin_memory in a CUDA run, a pin-memory
  thread of its process pays most of it beside the loop. Measured: see HANDOFF_S and
  HANDOFF_PINNED_S. A worker only helps when
  producing a batch in the loop costs more than receiving one, both without the time
  queued for a CPU that other processes keep busy (see uncontended_fetch_per_batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from gpudoctor import metrics
from gpudoctor.analysis.prediction import GAIN_WARNING, predict
from gpudoctor.model import Prediction
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import CpuSample, LoaderInfo, Session

WAIT_SHARE_WARNING = Threshold(
    "data wait worth a finding", 0.05, "share",
    "TensorBoard profiler plugin: input-bound above 5% of step time; below it the gain (< "
    "1.05x) is run-to-run noise")
WAIT_SHARE_CRITICAL = Threshold(
    "data wait that is critical", 0.30, "share",
    "gpudoctor: an upper-bound gain above 1.4x, fix the input pipeline first")
CPU_BOUND_RATIO = Threshold(
    "fetch CPU time / wall time: CPU-bound at or above", 0.7, "ratio",
    "gpudoctor: a margin above half the time on CPU (page faults and GIL hand-offs cost wall "
    "time without CPU)")
WAITING_RATIO = Threshold(
    "fetch CPU time / wall time: waiting at or below", 0.3, "ratio",
    "gpudoctor: a margin below half the time on CPU")
MAX_SHARE_FOR_GAIN = Threshold(
    "data wait share cap in 1 / (1 - share)", 0.99, "share",
    "keeps the gain finite when the loop only waits")
CORES_SATURATED_PERCENT = Threshold(
    "cores busy: saturated at or above", 90.0, "%",
    "psutil rarely reads above 90-95% even when every core is runnable (interrupts, scheduler "
    "idle)")

HEADROOM = Threshold(
    "worker count margin over F / C", 1.2, "x",
    "gpudoctor: absorbs jitter in the per-batch cost")
TOO_FEW_CORE_SHARE = Threshold(
    "workers below this share of usable cores: too few (fallback)", 0.7, "share",
    "SageMaker Debugger's 70-200% band, used only when F or C was not measured")
OVERSUBSCRIBED = Threshold(
    "workers above this many times the usable cores: too many", 2.0, "x",
    "SageMaker Debugger's 70-200% band, its top")
LIGHT_WORKERS_PER_CORE = CountThreshold(
    "workers per core when measured waiting", 8, "workers/core",
    "gpudoctor: workers measured waiting use a fraction of a core each")
DEEPER_PREFETCH = CountThreshold(
    "prefetch_factor recommended for bursty or I/O-bound fetches", 4, "batches",
    "PyTorch's default is 2; more batches in flight hide bursty fetches")
# What the consuming loop pays per batch received from a worker (queue, unpickling, tensors
# rebuilt from shared memory), when the run had no worker to measure it on. Measured with
# torch 2.13 on a 2-core machine: a TensorDataset batch of 64 cost the loop 0.16 ms produced
# in-process and 0.9-1.1 ms received from 1-2 workers.
HANDOFF_S = Threshold(
    "hand-off cost of a batch received from a worker (default)", 0.9e-3, "s",
    "a batch received from a worker cost the loop 0.9-1.1 ms (TensorDataset, batch 64, torch "
    "2.13, measured on a 2-core machine and a 16-core H200 host)")
HANDOFF_SOURCE = "a batch received from a worker cost the loop 0.9-1.1 ms (TensorDataset, batch 64, measured)"
# With pin_memory in a CUDA run the receiving is not the loop's: DataLoader starts a pin-memory
# thread in the loop's process that takes each batch off the workers' queue (unpickling it,
# rebuilding its tensors from shared memory) and pins it, beside the loop; the loop takes the
# finished batch from a thread queue. Measured with torch 2.13 on a 2-core machine (the pin
# thread's copy emulated by a clone): a loop of 3-10 ms of torch ops per batch of 64 (1x28x28)
# from 1-2 workers spent 0.36-0.47 ms a batch in __next__ with the thread, 1.1-2.1 ms without.
# On the H200 host (torch 2.11, benchmarks/rates.py's handoff, a TensorDataset batch of 64, a loop
# of 3 ms of torch ops, real pinning; benchmarks/results/handoff-h200-2026-12-04.json): 0.40 and
# 0.43 ms with 2 and 4 workers pinned, 0.76 with 8; 1.29, 0.73 and 1.22 ms unpinned.
HANDOFF_PINNED_S = Threshold(
    "hand-off cost of a batch received through the pin-memory thread (default)", 0.4e-3, "s",
    "with pin_memory a thread of the loop's process receives and pins each batch beside the loop: the "
    "loop spent 0.36-0.47 ms a batch in __next__ with it, 1.1-2.1 ms without (1-2 workers, batch 64, "
    "a loop of 3-10 ms of torch ops, measured on a 2-core machine); 0.40-0.43 ms with 2-4 workers on "
    "a 16-core H200 host")
HANDOFF_PINNED_SOURCE = ("a batch taken from the pin-memory thread, which receives and pins it beside the loop, "
                         "cost the loop 0.36-0.47 ms (batch 64, measured)")
# Creating a DataLoader iterator starts its workers (each epoch, unless persistent_workers): the
# loop's thread forks or spawns them one after another, between steps. Measured on the 16-core
# H200 host (torch 2.11, the agent's iterator timing in the kept corpus sessions of 2026-12-04):
# 20.4 ms per worker (dcgan, FakeData, 2 workers, 33 iterators in 1.35 s), 17.3 and 27.9 ms (timm
# ImageFolder, 4 workers, train and eval loaders), 30.8 ms (a synthetic loader, 2 pinned workers):
# the default is their median.
WORKER_START_S = Threshold(
    "start-up of one DataLoader worker at each iterator (default)", 24e-3, "s",
    "creating an iterator cost the loop 17-31 ms per worker it started, median 24 ms (2-4 workers, "
    "measured on a 16-core H200 host)")
HANDOFF_PERCENTILE = CountThreshold(
    "percentile of per-step waits taken as the measured hand-off", 10, "percentile",
    "gpudoctor: the batches that were ready when asked for")
HANDOFF_READY_SHARE = Threshold(
    "that percentile must be below this share of the median wait", 0.5, "share",
    "gpudoctor: only when ready batches are clearly told apart")
# what the stall classification and the worker plan compare against, for the checks' pages
STALL_LIMITS = (WAIT_SHARE_WARNING, WAIT_SHARE_CRITICAL, CPU_BOUND_RATIO, WAITING_RATIO, MAX_SHARE_FOR_GAIN)
WORKER_LIMITS = (HEADROOM, TOO_FEW_CORE_SHARE, OVERSUBSCRIBED, LIGHT_WORKERS_PER_CORE, DEEPER_PREFETCH, HANDOFF_S,
                 HANDOFF_PINNED_S, WORKER_START_S, HANDOFF_PERCENTILE, HANDOFF_READY_SHARE, CORES_SATURATED_PERCENT)

# why batches are late: CPU work producing them, waiting on I/O, both, or not measured
StallKind = Literal["cpu-bound", "waiting", "mixed", "unknown"]


@dataclass(frozen=True)
class StallClass:
    """Why batches are late, from where they are produced."""

    kind: StallKind
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
        """1 / (1 - share): the wait removed and nothing else changed (the rule)."""
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
        kind: StallKind = "cpu-bound" if busy >= CPU_BOUND_RATIO else "waiting" if busy <= WAITING_RATIO else "mixed"
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
    if not session.loaders:
        return None
    summary = metrics.step_summary(session)
    share = metrics.loader_wait_share(session)
    if share is None:
        return None
    loader = metrics.main_loader(session)
    window = summary.window if summary else "whole run (loader totals)"
    return InputStall(share, window, summary, loader, classify_stall(session, loader))


def data_prediction(session: Session, found: InputStall) -> Prediction | None:
    """The step without any data wait: replayed, bounded by the GPU, or 1 / (1 - share); for
    batches the loop makes itself, never less than the series model of that host work
    (gpudoctor.analysis.worker_gain)."""
    from gpudoctor.analysis.worker_gain import in_process_prediction

    predicted = predict(session, "data", host_side=True, rule_gain=found.gain,
                        rule_detail=f"1 / (1 - {found.share:.0%} data wait): the wait removed, nothing else changed")
    loader = found.loader
    serial = in_process_prediction(session, found, loader, batches_per_step(session, loader)) if loader else None
    if serial is not None and (predicted is None or serial.gain > predicted.gain * 1.05):
        if predicted is not None:
            serial = replace(serial, detail=f"{serial.detail} (the {predicted.method} said {predicted.gain:.2f}x)")
        return serial
    return predicted


# ---- CPU load -------------------------------------------------------------------------------

def workload_cores(samples: list[CpuSample]) -> float | None:
    """Cores the workload's process tree used on average, None when the tree was not sampled."""
    values = [s.tree_percent for s in samples]
    if not any(v > 0 for v in values):  # tree_percent defaults to 0.0: all zeros = not sampled
        return None
    return (metrics.mean(values) or 0.0) / 100.0


def cores_busy_percent(session: Session, samples: list[CpuSample]) -> float | None:
    """How busy the usable cores were, 0-100: the higher of the machine's view and the
    workload's own use of its usable cores (under a cgroup quota smaller than the
    affinity, the machine looks idle while the job is throttled at its quota)."""
    system = metrics.mean([s.system_percent for s in samples])
    used = workload_cores(samples)
    cores = metrics.usable_cores(session)
    quota_view = min(100.0, used / cores * 100.0) if used is not None and cores else None
    views = [v for v in (system, quota_view) if v is not None]
    return max(views) if views else None


# ---- workers --------------------------------------------------------------------------------

def ranks_with_loaders(session: Session) -> int:
    """Processes sharing this node's cores: in a distributed job the ranks on the node (the
    launcher's LOCAL_WORLD_SIZE; each rank's loop and workers need cores, whether or not its
    loader was seen), else the processes iterating a loader at once."""
    seen = len({lo.pid for lo in session.loaders if lo.batches > 0})
    if session.ranks:
        from gpudoctor.analysis.ranks import ranks_per_node

        return max(1, ranks_per_node(session) or 0, seen)
    return max(1, seen)


def total_workers(session: Session) -> int:
    """Worker processes alive together: per process, its largest loader's workers."""
    per_pid: dict[int, int] = {}
    for lo in session.loaders:
        if lo.batches > 0:
            per_pid[lo.pid] = max(per_pid.get(lo.pid, 0), lo.num_workers)
    return sum(per_pid.values())


def light_workers(found: InputStall | None) -> bool:
    """Workers that mostly wait: each uses only a fraction of a core."""
    return found is not None and found.stall.kind == "waiting" and found.stall.fetch_cpu_ratio is not None


def worker_cap(cores: float, ranks: int, found: InputStall | None) -> int:
    """The most workers per rank the usable cores carry, one core left to the main process."""
    per_rank = cores / ranks
    cap = max(1, math.floor(per_rank) - 1)
    if light_workers(found) and found is not None and found.stall.fetch_cpu_ratio is not None:
        ratio = found.stall.fetch_cpu_ratio
        by_cpu = (per_rank - 1) / ratio if ratio > 0 else math.inf
        cap = max(cap, math.floor(min(LIGHT_WORKERS_PER_CORE * per_rank, by_cpu)))
    return cap


@dataclass(frozen=True)
class WorkerPlan:
    """How many workers the measured load needs, and what they would buy."""

    fetch_s: float | None  # F: producing one batch (in a worker, or in the loop when num_workers=0)
    compute_s: float | None  # C: the loop's time per batch besides waiting for data
    needed: int | None  # ceil(F / C x headroom); None when not measured or C ~ 0
    cap: int | None  # the usable cores' limit per rank
    recommended: int | None  # num_workers to set; None when no worker count helps
    cap_binds: bool
    handoff_s: float  # what the loop pays per batch received from a worker
    handoff_measured: bool
    prediction: Prediction | None  # the step with `recommended` workers
    why_not: str | None = None  # why no worker count helps, with the numbers
    handoff_bound: bool = False  # a batch costs the loop less to produce than to receive from a worker


def pin_thread_receives(session: Session, loader: LoaderInfo) -> bool:
    """Whether a pin-memory thread, not the loop, would receive the workers' batches: pin_memory
    set in a run that uses CUDA (without an accelerator DataLoader drops pin_memory)."""
    return bool(loader.pin_memory) and bool(session.torch_cuda_used)


def default_handoff(session: Session, loader: LoaderInfo) -> tuple[float, str]:
    """(the hand-off the loop pays when the run cannot measure it, where that number comes from)."""
    if pin_thread_receives(session, loader):
        return HANDOFF_PINNED_S, HANDOFF_PINNED_SOURCE
    return HANDOFF_S, HANDOFF_SOURCE


def workers_outpace_loop(session: Session, loader: LoaderInfo, found: InputStall) -> bool:
    """Whether the workers made batches faster than the loop took them (F / workers < C), so that
    some batches were ready when asked for. Workers slower than the loop leave the queue empty in
    steady state: every wait is for a batch still being made, the shortest too, and no wait is the
    hand-off alone (examples/mnist on an H200: 1 worker at 11.2 ms a batch against 2.9 ms of loop;
    its 10th-percentile wait, 4.7 ms, was a wait). Not measured: no objection."""
    fetch = metrics.fetch_time_per_batch(loader)
    compute_step = found.compute_per_step_s
    if loader.num_workers <= 0 or fetch is None or compute_step is None:
        return True
    return fetch / loader.num_workers < compute_step / batches_per_step(session, loader)


def handoff_cost(session: Session, loader: LoaderInfo, found: InputStall) -> tuple[float, bool]:
    """(seconds per batch the loop pays to receive a batch from a worker, measured?): the waits of
    the steps whose batch was ready, when the workers outpaced the loop; else the default."""
    records = session.steady_steps()
    if loader.num_workers > 0 and len(records) >= 10 and workers_outpace_loop(session, loader, found):
        per_batch = batches_per_step(session, loader)
        waits = sorted(min(r.data_wait_s, r.duration_s) / per_batch for r in records)
        ready = metrics.percentile(waits, HANDOFF_PERCENTILE)
        typical = metrics.percentile(waits, 50)
        # only when some batches were clearly ready: otherwise the low waits are waits too
        if ready is not None and typical is not None and 0 < ready < HANDOFF_READY_SHARE * typical:
            return ready, True
    return default_handoff(session, loader)[0], False


def uncontended_fetch_per_batch(loader: LoaderInfo) -> float | None:
    """What producing one batch costs with the time spent queued for a CPU taken out.

    Wall = CPU + waiting for a CPU + blocked (I/O, sleeps). On a machine whose cores other
    processes keep busy, the loop's own fetch is stretched by the run queue while HANDOFF_S
    (measured on an idle machine) is not: the hand-off is CPU work in the same loop and
    would be stretched alike. Comparing the two without the run queue compares like with
    like. The run queue read around a fetch can catch a preemption just outside it, so the
    cost never drops below the fetch's own CPU time.
    """
    if loader.fetch_batches == 0:
        return None
    wall = loader.fetch_wall_s
    if loader.fetch_runqueue_s is not None:
        wall = max(loader.fetch_cpu_s, wall - loader.fetch_runqueue_s)
    return wall / loader.fetch_batches


def in_rhythm_compute_per_step(session: Session, found: InputStall) -> float | None:
    """The loop's time per step besides waiting, without the host time the profiled window's steps do
    not stand for (an epoch's end and start, checkpoints: gpudoctor.replay.calibration). Workers keep
    pace with the steps' rhythm, not with that time spread over them: dcgan's 16-batch epochs
    spent 20 ms a step of it (saving images and checkpoints, starting workers) beside a 15 ms loop."""
    from gpudoctor.analysis.prediction import unrepresented_per_step

    compute = found.compute_per_step_s
    if compute is None:
        return None
    apart, apart_wait = unrepresented_per_step(session)
    return max(0.0, compute - (apart - apart_wait))


def worker_plan(session: Session, loader: LoaderInfo, found: InputStall) -> WorkerPlan:
    cores = metrics.usable_cores(session)
    ranks = ranks_with_loaders(session)
    per_batch = batches_per_step(session, loader)
    fetch = metrics.fetch_time_per_batch(loader)
    compute_step = in_rhythm_compute_per_step(session, found)
    compute = compute_step / per_batch if compute_step is not None else None
    needed = None
    if fetch is not None and compute is not None and compute > 1e-6:
        needed = max(1, math.ceil(round(fetch / compute * HEADROOM, 6)))
    cap = worker_cap(cores, ranks, found) if cores else None
    handoff, measured = handoff_cost(session, loader, found)
    if needed is not None and cap is not None:
        recommended: int | None = min(needed, cap)
    elif needed is not None:
        recommended = needed
    elif cap is not None and cores and (fetch is None or compute is None):
        # per-batch cost unknown: SageMaker Debugger's lower bound decides
        recommended = cap if loader.num_workers < TOO_FEW_CORE_SHARE * cores / ranks else None
    elif cap is not None:
        recommended = cap  # the loop does nothing but wait: as many as the cores carry
    else:
        recommended = None
    cap_binds = cap is not None and fetch is not None and compute is not None and (needed is None or needed > cap)
    plan = WorkerPlan(fetch_s=fetch, compute_s=compute, needed=needed, cap=cap, recommended=None,
                      cap_binds=cap_binds, handoff_s=handoff, handoff_measured=measured, prediction=None)
    if recommended is not None and loader.num_workers > 0 and recommended <= loader.num_workers:
        # as many workers as the load needs or the cores carry are there already: more would not help (a
        # Trainer with 2 workers on 2 usable cores was told to add workers "up to the usable cores")
        reasons = ([f"the loop needs {needed} at its pace"] if needed is not None and needed <= loader.num_workers
                   else []) + ([f"{cores:g} usable cores carry {cap} beside the loop"]
                               if cap is not None and cores and loader.num_workers >= cap else [])
        return replace(plan, why_not=f"it has {workers_text(loader.num_workers)} already: " + " and ".join(reasons))
    if recommended is None or recommended <= loader.num_workers:
        return plan
    own = uncontended_fetch_per_batch(loader)
    if loader.num_workers == 0 and own is not None and own <= handoff:
        queued = (f" ({metrics.format_duration(fetch)} with the time it waited for a busy CPU, which a "
                  f"hand-off would wait for too)" if fetch is not None and fetch > own * 1.05 else "")
        why = (f"producing a batch in the loop costs {metrics.format_duration(own)}{queued}, no more than "
               f"receiving one from a worker (about {metrics.format_duration(handoff)}"
               + ("" if measured else f": {default_handoff(session, loader)[1]}") + ")")
        # what workers would do all the same, at each count the cores carry: the loop pays the hand-off
        # instead of the cheaper batch, a slowdown (the DDP tutorial's Linear(20, 1) on an H200: 2 workers
        # ran 0.69x as fast). A user who adds them anyway is owed that number, not the instant-data one
        slower = _workers_prediction(session, found, loader, fetch, compute, max(recommended, cap or 0), handoff)
        if slower is not None and slower.worker_curve:
            why += f"; {_curve_range(slower.worker_curve)}"
        return replace(plan, cap_binds=False, why_not=why, handoff_bound=True,
                       prediction=slower if slower is not None and slower.worker_curve else None)
    prediction = _workers_prediction(session, found, loader, fetch, compute, recommended, handoff)
    if prediction is not None and prediction.gain < GAIN_WARNING:
        if prediction.gain >= 1:
            why = (f"{workers_text(recommended)} would make a step only {prediction.gain:.2f}x faster: the loop "
                   f"would still wait for them, or pay the hand-off")
        else:
            restart = "" if loader.persistent_workers else ", and starting them each epoch,"
            why = (f"{workers_text(recommended)} would make a step {prediction.gain:.2f}x as fast, slower than "
                   f"now: receiving their batches{restart} would cost the loop more than making the batches")
        return replace(plan, prediction=prediction, why_not=why)
    return replace(plan, recommended=recommended, prediction=prediction)


MAX_CURVE_POINTS = 32  # worker counts a finding's worker_curve holds (the report schema allows 64)


def _curve_range(curve: tuple[tuple[int, float], ...]) -> str:
    """'1-15 workers would make a step 0.55-0.69x as fast' (or '1 worker would make a step 0.69x as fast')."""
    counts = f"{curve[0][0]}-{curve[-1][0]} workers" if len(curve) > 1 else workers_text(curve[0][0])
    low, high = min(g for _, g in curve), max(g for _, g in curve)
    gains = f"{low:.2f}x" if round(low, 2) == round(high, 2) else f"{low:.2f}-{high:.2f}x"
    return f"{counts} would make a step {gains} as fast"


def workers_text(n: int) -> str:
    """'1 worker', '2 workers'."""
    return f"{n} worker" if n == 1 else f"{n} workers"


def curve_counts(now: int, recommended: int) -> tuple[int, ...]:
    """The worker counts a worker curve holds: each one from one more than now to the recommended,
    evenly thinned to MAX_CURVE_POINTS (light workers may be recommended by the hundred)."""
    first = now + 1
    if recommended < first:
        return ()
    span = recommended - first
    if span < MAX_CURVE_POINTS:
        return tuple(range(first, recommended + 1))
    step = span / (MAX_CURVE_POINTS - 1)
    return tuple(sorted({first + round(i * step) for i in range(MAX_CURVE_POINTS)}))


def _workers_prediction(session: Session, found: InputStall, loader: LoaderInfo, fetch: float | None,
                        compute: float | None, workers: int, handoff: float) -> Prediction | None:
    """The step with `workers` workers (gpudoctor.analysis.worker_gain.workers_prediction): the step
    without any wait, plus the hand-off and what the workers the cores carry leave to wait. It carries
    the same model's gain at each count between now and `workers` (``worker_curve``): a user who sets
    fewer workers than recommended is owed the number for the count set, not the recommended one's."""
    from gpudoctor.analysis.worker_gain import workers_prediction

    instant = data_prediction(session, found)
    if fetch is None or compute is None or instant is None:
        return instant
    cores = metrics.usable_cores(session)
    per_rank = cores / ranks_with_loaders(session) if cores else None
    per_step = batches_per_step(session, loader)

    def at(count: int) -> Prediction:
        return workers_prediction(session, found, loader, instant, fetch, compute, count, handoff, per_step,
                                  per_rank)

    curve = tuple((count, at(count).gain) for count in curve_counts(loader.num_workers, workers))
    return replace(at(workers), worker_curve=curve)


def loader_line(loader: LoaderInfo, workers: int, *, gpu: bool, deeper_prefetch: bool) -> str:
    """The DataLoader call with `workers` workers and the options that go with them."""
    args = ["dataset"]
    if loader.batch_size:
        args.append(f"batch_size={loader.batch_size}")
    args.append(f"num_workers={workers}")
    if gpu:
        args.append("pin_memory=True")  # lets the H2D copy run asynchronously (GD105)
    if workers > 0:
        args.append("persistent_workers=True")  # no worker restart (and dataset re-pickle) each epoch
        if deeper_prefetch:
            args.append(f"prefetch_factor={max(DEEPER_PREFETCH, loader.prefetch_factor or 0)}")
        elif loader.prefetch_factor and loader.prefetch_factor != 2:
            args.append(f"prefetch_factor={loader.prefetch_factor}")
    return "loader = DataLoader(" + ", ".join(args) + ")"
