"""GD101 loader-workers: DataLoader workers too few for the load, or far more than the cores.

What it detects
    - **Too few**: the loop waits for data (GD102's 5% line) and the measured cost of
      producing a batch says more workers would keep up: ``num_workers=0`` (every
      batch is produced in the main process, in series with the training step) or a
      worker count well below what the load needs. The remedy names the number.
    - **Too many**: more than twice as many workers as usable cores. They compete for
      the cores with each other and with the main process (context switches, cache
      thrash), and each holds its own copy of the dataset object plus
      ``prefetch_factor`` batches in memory.

Why it matters
    With ``W`` workers each taking ``F`` seconds per batch, the loader delivers at most
    ``W / F`` batches per second. The loop consumes one batch every ``C`` seconds of
    compute. If ``W / F < 1 / C`` the loop waits, the GPU idles, and nothing on the GPU
    side helps.

How it is measured
    - ``F``: wall time to produce one batch, measured by the agent where it happens (in
      each worker, or in the main process when ``num_workers=0``), averaged over the run.
    - ``C``: compute per batch = mean steady step time minus mean data wait per step,
      divided by the batches consumed per step (gradient accumulation).
    - Usable cores: the workload's CPU affinity and cgroup quota, not
      ``os.cpu_count()`` (a container on a 128-core host may have 8). With several
      ranks on one host, each rank gets its share.
    - Needed workers ``= ceil(F / C x 1.2)``: 20% headroom absorbs the jitter in
      ``F`` (slow samples, page-cache misses), so the queue rarely runs dry.
    - The recommendation is capped at ``max(1, cores per rank - 1)``: the main process
      needs a core of its own to launch GPU work. When the cap binds, more workers
      cannot close the gap and each batch must also get cheaper.
    - Workers that mostly wait (GD102 classifies the stall ``waiting``: CPU time at
      most 30% of the wall time per batch) use only that fraction ``r`` of a core
      each, so for them the cap is ``min(8 x cores per rank, (cores per rank - 1) / r)``:
      their real CPU use still leaves the main process its core, and 8 per core keeps
      their prefetch memory modest. More in-flight reads hide latency (measured on 2
      cores: 6 sleeping workers ran a loader-bound loop 6x faster than 1); the
      durable fix is still faster storage (GD104).

Thresholds, and where they come from
    - Too few: data-wait share >= 5% (TensorBoard profiler plugin, as GD102) and the
      needed workers exceed the current count. Graded by the speed-up the
      recommendation itself buys (``step now / max(C, F / workers)``, never above
      GD102's bound): critical from 1.43x, warning from 1.05x, a note below; these are
      GD102's 30% and 5% data-wait lines expressed as gains. When the cores cap the
      workers, a large stall may leave only a small gain to this change.
    - When ``F`` or ``C`` was not measured, a count below 70% of the usable cores is
      "too few" (SageMaker Debugger's 70-200% band) and the recommendation is the cap.
    - Too many: above 200% of the usable cores (the top of SageMaker Debugger's band),
      unless the workers were measured waiting and their CPU use fits the cores.
      Inside the band workers that mostly wait on I/O are harmless, so only a real
      oversubscription is flagged; it is a warning when the pipeline stalls or the CPU
      is saturated (>= 90%), a note otherwise.

What to do
    Set ``num_workers`` to the number given, keep the workers alive across epochs
    (``persistent_workers=True``), pin host memory when training on a GPU
    (``pin_memory=True``), and raise ``prefetch_factor`` when batches are produced in
    bursts or mostly wait on I/O.

Example
    Bad: every batch decoded in the main process, in series with the step::

        loader = DataLoader(dataset, batch_size=128)

    Good: sized from the measurements (here F = 120 ms, C = 40 ms, 8 usable cores)::

        loader = DataLoader(dataset, batch_size=128, num_workers=4, pin_memory=True,
                            persistent_workers=True)
"""

from __future__ import annotations

import math

from gpudoctor import metrics
from gpudoctor.checks.gd102_input_stall import (
    WAIT_SHARE_CRITICAL,
    WAIT_SHARE_WARNING,
    InputStall,
    batches_per_step,
    input_stall,
)
from gpudoctor.checks.gd103_cpu_saturation import CORES_SATURATED_PERCENT, cores_busy_percent
from gpudoctor.model import Check, Evidence, Finding, Remedy, Skip
from gpudoctor.session import LoaderInfo, Session

HEADROOM = 1.2  # absorbs jitter in the per-batch cost
TOO_FEW_CORE_SHARE = 0.7  # SageMaker Debugger: workers below 70% of cores (fallback only)
OVERSUBSCRIBED = 2.0  # SageMaker Debugger: workers above 200% of cores
# Workers measured waiting (sleeping on storage or network) use a fraction of a core
# each; up to this many per core still leave CPU for the main process, and each
# worker's own prefetch buffers (memory) stay modest.
LIGHT_WORKERS_PER_CORE = 8
DEEPER_PREFETCH = 4  # default is 2; more batches in flight hide bursty or I/O-bound fetches


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def ranks_with_loaders(session: Session) -> int:
    """Processes iterating a loader at once (torchrun ranks on one host share its cores)."""
    return max(1, len({lo.pid for lo in session.loaders if lo.batches > 0}))


def total_workers(session: Session) -> int:
    """Worker processes alive together: per process, its largest loader's workers."""
    per_pid: dict[int, int] = {}
    for lo in session.loaders:
        if lo.batches > 0:
            per_pid[lo.pid] = max(per_pid.get(lo.pid, 0), lo.num_workers)
    return sum(per_pid.values())


def dataloader_line(session: Session, loader: LoaderInfo, workers: int, deeper_prefetch: bool) -> str:
    args = ["dataset"]
    if loader.batch_size:
        args.append(f"batch_size={loader.batch_size}")
    args.append(f"num_workers={workers}")
    if session.torch_cuda_used:
        args.append("pin_memory=True")  # lets the H2D copy run asynchronously (GD105)
    if workers > 0:
        args.append("persistent_workers=True")  # no worker restart (and dataset re-pickle) each epoch
        if deeper_prefetch:
            args.append(f"prefetch_factor={max(DEEPER_PREFETCH, loader.prefetch_factor or 0)}")
        elif loader.prefetch_factor and loader.prefetch_factor != 2:
            args.append(f"prefetch_factor={loader.prefetch_factor}")
    return "loader = DataLoader(" + ", ".join(args) + ")"


def _cores_evidence(session: Session, cores: float, ranks: int) -> dict[str, Evidence]:
    cpu = session.environment.cpu
    detail = []
    if cpu.affinity_cores is not None:
        detail.append(f"affinity {cpu.affinity_cores}")
    if cpu.cgroup_quota_cores is not None:
        detail.append(f"cgroup quota {cpu.cgroup_quota_cores:g}")
    if cpu.logical_cores is not None:
        detail.append(f"machine {cpu.logical_cores}")
    out = {"usable_cores": Evidence(round(cores, 2), "cores", "whole run",
                                    "usable cores (" + ", ".join(detail) + ")" if detail else "usable cores")}
    if ranks > 1:
        out["ranks_on_host"] = Evidence(ranks, "processes", "whole run", "processes iterating a DataLoader")
    return out


def run(session: Session) -> list[Finding]:
    if not session.loaders:
        raise Skip("no DataLoader seen")
    loader = metrics.main_loader(session)
    if loader is None:
        raise Skip("no DataLoader produced a batch")
    cores = metrics.usable_cores(session)
    ranks = ranks_with_loaders(session)
    found = input_stall(session)
    if cores and total_workers(session) > OVERSUBSCRIBED * cores:
        if not _light_workers(found) or total_workers(session) > worker_cap(cores, ranks, found) * ranks:
            return [_too_many(session, loader, cores, ranks, found)]
        # workers that sleep on I/O can outnumber the cores: their CPU use still fits
    if found is None or not found.significant:
        return []
    finding = _too_few(session, loader, cores, ranks, found)
    return [finding] if finding else []


def _plan(session: Session, loader: LoaderInfo,
          found: InputStall | None) -> tuple[float | None, float | None, int | None]:
    """(F per batch, C per batch, needed workers); None where not measured.

    needed is None also when C is ~0 (the loop does nothing but wait): then no finite
    number of workers is "enough" and the core cap decides.
    """
    fetch = metrics.fetch_time_per_batch(loader)
    compute_step = found.compute_per_step_s if found else None
    compute = compute_step / batches_per_step(session, loader) if compute_step is not None else None
    if fetch is None or compute is None or compute <= 1e-6:
        return fetch, compute, None
    # rounded first so float noise (59.9999999 vs 60) cannot add a worker
    return fetch, compute, max(1, math.ceil(round(fetch / compute * HEADROOM, 6)))


def _light_workers(found: InputStall | None) -> bool:
    """Workers that mostly wait: each uses only a fraction of a core."""
    return (found is not None and found.stall.kind == "waiting"
            and found.stall.fetch_cpu_ratio is not None)


def worker_cap(cores: float, ranks: int, found: InputStall | None) -> int:
    """The most workers per rank the usable cores carry, one core left to the main process."""
    per_rank = cores / ranks
    cap = max(1, math.floor(per_rank) - 1)
    if _light_workers(found) and found is not None and found.stall.fetch_cpu_ratio is not None:
        ratio = found.stall.fetch_cpu_ratio
        by_cpu = (per_rank - 1) / ratio if ratio > 0 else math.inf
        # in-flight reads hide latency: as many workers as their measured CPU use fits,
        # bounded (LIGHT_WORKERS_PER_CORE per core) so memory and file handles stay sane
        cap = max(cap, math.floor(min(LIGHT_WORKERS_PER_CORE * per_rank, by_cpu)))
    return cap


def _cap_label(found: InputStall | None) -> str:
    if _light_workers(found):
        return "min(8 x cores per rank, (cores per rank - 1) / worker CPU share)"
    return "usable cores per rank - 1 (main process)"


def _too_few(session: Session, loader: LoaderInfo, cores: float | None, ranks: int,
             found: InputStall) -> Finding | None:
    fetch, compute, needed = _plan(session, loader, found)
    cap = worker_cap(cores, ranks, found) if cores else None
    measured_plan = fetch is not None and compute is not None
    if measured_plan and needed is not None and needed <= loader.num_workers:
        return None  # enough workers on paper: the wait is elsewhere (GD102 says where)
    # per-batch cost unknown: fall back on SageMaker Debugger's lower bound
    if not measured_plan and (cores is None or loader.num_workers >= TOO_FEW_CORE_SHARE * cores / ranks):
        return None
    if needed is not None and cap is not None:
        recommended = min(needed, cap)
    elif needed is not None:
        recommended = needed
    elif cap is not None:
        recommended = cap
    else:
        return None  # neither a measured need nor a core budget to size from
    if recommended <= loader.num_workers:
        return None  # the cores are already used: only cheaper batches help (GD102/GD103)
    cap_binds = cap is not None and (needed is None or needed > cap) and measured_plan

    stall_kind = found.stall.kind
    where = "in the main process" if loader.num_workers == 0 else "in a worker"
    evidence: dict[str, Evidence] = {
        "num_workers": Evidence(loader.num_workers, "workers", None, f"DataLoader {loader.loader_id}"),
        "data_wait_share": Evidence(round(found.share * 100, 1), "%", found.window, "data wait / step time"),
        "recommended_workers": Evidence(recommended, "workers", None, "num_workers to set"),
    }
    if cores:
        evidence.update(_cores_evidence(session, cores, ranks))
        evidence["worker_cap"] = Evidence(cap, "workers", None, _cap_label(found))
    if fetch is not None:
        evidence["fetch_time_per_batch"] = Evidence(_ms(fetch), "ms", f"whole run, {where}",
                                                    "time to produce one batch (F)")
    if compute is not None:
        evidence["compute_per_batch"] = Evidence(_ms(compute), "ms", found.window,
                                                 "step time - data wait, per batch (C)")
    if needed is not None:
        evidence["needed_workers"] = Evidence(needed, "workers", None, "ceil(F / C x 1.2)")

    parts = []
    if fetch is None or compute is None:
        parts.append(f"The per-batch cost was not measured; {loader.num_workers} workers is below 70% of the "
                     f"{cores:g} usable cores.")
    elif needed is not None:
        parts.append(f"Producing a batch takes {metrics.format_duration(fetch)} {where} while the loop computes for "
                     f"{metrics.format_duration(compute)} per batch, so keeping up needs ceil(F / C x {HEADROOM}) = "
                     f"{_workers(needed)}.")
    else:
        parts.append(f"Producing a batch takes {metrics.format_duration(fetch)} {where} and the loop does almost "
                     "nothing but wait, so no worker count is too many for this load.")
    if cap is None:
        parts.append("Usable cores were not measured, so the number is not capped by them.")
    else:
        share_text = f" per rank ({ranks} ranks)" if ranks > 1 else ""
        if _light_workers(found):
            parts.append(f"The workers mostly wait (CPU {found.stall.fetch_cpu_ratio:.0%} of each batch's wall "
                         f"time), so {cores:g} usable cores{share_text} carry up to {cap} of them (at most 8x the "
                         "cores, one core left for the main process).")
        else:
            parts.append(f"{cores:g} usable cores{share_text} allow at most {_workers(cap)} (one core stays with "
                         "the main process).")
    if cap_binds and cap is not None:
        how = "faster or local storage, see GD104" if stall_kind == "waiting" else "cheaper preprocessing, see GD102"
        parts.append(f"Even {_workers(cap)} cannot keep up: each batch must also get cheaper ({how}).")
    head = (f"DataLoader {loader.loader_id} has num_workers={loader.num_workers} and the loop waited for data "
            f"{found.share:.0%} of each step over {found.window}. ")
    gain = _gain(found, fetch, compute, recommended, loader, session)
    if loader.num_workers == 0:
        title = "DataLoader produces batches in the main process (num_workers=0)"
    elif needed is not None:
        title = f"Too few DataLoader workers: {loader.num_workers}, about {recommended} needed"
    else:
        title = f"Too few DataLoader workers: {loader.num_workers} on {cores:g} usable cores"
    remedy_text = f"Set num_workers={recommended}"
    remedy_text += " (the most the usable cores allow) and make each batch cheaper." if cap_binds else "."
    deeper = stall_kind in ("waiting", "mixed")
    return Finding(
        severity=_severity(gain),
        title=title,
        message=head + " ".join(parts),
        evidence=evidence,
        remedy=Remedy(text=remedy_text + " Keep workers alive across epochs (persistent_workers=True)"
                      + (" and prefetch deeper, since batches mostly wait on I/O." if deeper else "."),
                      code=dataloader_line(session, loader, recommended, deeper)),
        estimated_gain=gain,
    )


def _severity(gain: float) -> str:
    """GD102's data-wait lines (5%, 30%) turned into the speed-up they stand for.

    Graded by what the recommendation gains, not by the stall: when the cores cap the
    workers, a stall of 90% may leave only a few percent to this change.
    """
    if gain >= 1.0 / (1.0 - WAIT_SHARE_CRITICAL):
        return "critical"
    if gain >= 1.0 / (1.0 - WAIT_SHARE_WARNING):
        return "warning"
    return "info"


def _workers(n: int) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


def _gain(found: InputStall, fetch: float | None, compute: float | None, workers: int,
          loader: LoaderInfo, session: Session) -> float:
    """Speed-up if `workers` produce at F each: step paced by max(C, F / workers).

    Never above GD102's bound 1 / (1 - share), the gain if the wait vanished.
    """
    if fetch is None or compute is None or compute <= 0 or found.steps is None:
        return found.gain
    per_batch_now = 1.0 / (found.steps.steps_per_s * batches_per_step(session, loader))
    per_batch_after = max(compute, fetch / workers)
    return max(1.0, min(found.gain, per_batch_now / per_batch_after))


def _too_many(session: Session, loader: LoaderInfo, cores: float, ranks: int,
              found: InputStall | None) -> Finding:
    workers = total_workers(session)
    fetch, compute, needed = _plan(session, loader, found)
    cap = worker_cap(cores, ranks, found)
    recommended = min(needed, cap) if needed is not None else cap
    cpu = cores_busy_percent(session, metrics.cpu_samples_steady(session))
    stalled = found is not None and found.significant
    saturated = cpu is not None and cpu >= CORES_SATURATED_PERCENT
    evidence: dict[str, Evidence] = {
        "num_workers": Evidence(loader.num_workers, "workers", None, f"DataLoader {loader.loader_id}"),
        "total_workers": Evidence(workers, "workers", "whole run", "worker processes alive together"),
        **_cores_evidence(session, cores, ranks),
        "recommended_workers": Evidence(recommended, "workers", None, "num_workers to set"),
    }
    window = found.window if found else "whole run"
    if cpu is not None:
        evidence["cpu_busy"] = Evidence(round(cpu, 1), "%", window, "usable cores busy (mean)")
    if found is not None:
        evidence["data_wait_share"] = Evidence(round(found.share * 100, 1), "%", found.window, "data wait / step time")
    symptoms = []
    if saturated:
        symptoms.append(f"the usable cores were {cpu:.0f}% busy")
    if stalled and found is not None:
        symptoms.append(f"the loop still waited for data {found.share:.0%} of each step")
    message = (f"{workers} DataLoader worker processes run on {cores:g} usable cores "
               f"({workers / cores:.1f}x, above the 2x line). "
               + (f"They thrash: {' and '.join(symptoms)}. " if symptoms else
                  ("The loop did not wait for data" if found is not None else
                   "Whether the loop waits for data was not measured")
                  + ", but each worker costs memory and start-up time. ")
               + f"About {recommended}{' per rank' if ranks > 1 else ''} suffice"
               + (f" (F = {metrics.format_duration(fetch)}, C = {metrics.format_duration(compute)} per batch)."
                  if needed is not None and fetch is not None and compute is not None
                  else f" ({_cap_label(found)})."))
    return Finding(
        severity="warning" if (saturated or stalled) else "info",
        title=f"{workers} DataLoader workers on {cores:g} usable cores: oversubscribed",
        message=message,
        evidence=evidence,
        remedy=Remedy(text=f"Set num_workers={recommended}: the usable cores (CPU affinity and cgroup quota, not "
                      "os.cpu_count()) bound the useful worker count.",
                      code=dataloader_line(session, loader, recommended, deeper_prefetch=False)),
        estimated_gain=None,
    )


CHECK = Check(
    id="GD101",
    slug="loader-workers",
    stage=1,
    title="DataLoader workers vs usable cores",
    run=run,
    requires=("loader",),
    doc=__doc__ or "",
)
