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
    - Too few: data-wait share >= {{WAIT_SHARE_WARNING}} (TensorBoard profiler plugin, as GD102) and the
      needed workers exceed the current count. The finding carries the step time
      predicted with the recommended workers: per batch the loop computes (``C``),
      receives the batch from a worker (the hand-off ``H``: unpickling it and
      rebuilding its tensors) and waits for what the workers could not produce
      meanwhile, ``C + H + max(0, F / w - (C + H))``, against the same model of the
      current setting (``C + F`` with no workers), and never faster than the step
      with batches arriving instantly (GD102's prediction, bounded by what the GPU
      allows). Graded by that gain: critical from {{GAIN_CRITICAL}}, warning from {{GAIN_WARNING}}; under
      it, no advice (more workers would not pay), and GD102 says what to change instead.
    - ``H`` is measured from the run when it had workers and some batches were ready
      (the {{HANDOFF_PERCENTILE}} of the per-step wait, when below {{HANDOFF_READY_SHARE}} of the median), which
      can only be when the workers made batches faster than the loop took them
      (``F / workers < C``): slower workers leave the queue empty, and every wait, the
      shortest too, is for a batch still being made. Else {{HANDOFF_S}}: what a TensorDataset batch of
      64 cost the loop received from 1-8 workers, measured on a 2-core machine and on a
      16-core H200 host; or, with ``pin_memory`` in a CUDA run, {{HANDOFF_PINNED_S}}: a pin-memory
      thread of the loop's process then receives (unpickles, rebuilds) and pins each batch
      beside the loop, which only takes it from a thread queue. A dataset whose items
      are already tensors in memory produces a batch faster than that in the loop, so
      it is not told to add workers: batched indexing helps it instead.
    - ``C`` leaves out the host time the profiled window's steps do not stand for (an
      epoch's end and start, checkpoints): workers keep pace with the steps. Workers that
      are not persistent start again at each epoch after the first: the prediction adds
      their start-up per epoch (the run's own iterator timing per worker, else
      {{WORKER_START_S}} measured on an H200 host), and with ``num_workers=0`` now the first
      batch of each epoch, which the loop then waits for.
    - When ``F`` or ``C`` was not measured, a count below {{TOO_FEW_CORE_SHARE}} of the usable cores is
      "too few" (SageMaker Debugger's 70-200% band) and the recommendation is the cap.
    - Too many: above {{OVERSUBSCRIBED}} the usable cores (the top of SageMaker Debugger's band),
      unless the workers were measured waiting and their CPU use fits the cores.
      Inside the band workers that mostly wait on I/O are harmless, so only a real
      oversubscription is flagged; it is a warning when the pipeline stalls or the CPU
      is saturated (>= {{CORES_SATURATED_PERCENT}}), a note otherwise.

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

from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.input_pipeline import (
    CORES_SATURATED_PERCENT,
    HEADROOM,
    OVERSUBSCRIBED,
    STALL_LIMITS,
    WORKER_LIMITS,
    InputStall,
    WorkerPlan,
    cores_busy_percent,
    light_workers,
    loader_line,
    ranks_with_loaders,
    total_workers,
    worker_cap,
    worker_plan,
    workers_text,
)
from gpudoctor.analysis.prediction import SEVERITY_GAINS, severity_for
from gpudoctor.analysis.shared import analyses
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check

if TYPE_CHECKING:
    from gpudoctor.session import LoaderInfo, Session


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


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
        out["cores_per_rank"] = Evidence(round(cores / ranks, 2), "cores", "whole run", "usable cores per rank")
    return out


def _cores_text(cores: float, ranks: int) -> str:
    """'2 usable cores' or '1 usable core per rank (2 usable cores, 2 ranks)'."""
    if ranks <= 1:
        return f"{cores:g} usable core{'s' if cores != 1 else ''}"
    per_rank = cores / ranks
    return f"{per_rank:.3g} usable core{'s' if per_rank != 1 else ''} per rank ({cores:g} usable, {ranks} ranks)"


@check("GD101", "loader-workers", stage=1, title="DataLoader workers vs usable cores",
       requires=("loader",), explains=("GD201", "GD202"),
       thresholds=(*STALL_LIMITS, *WORKER_LIMITS, *SEVERITY_GAINS), owns=("num_workers",),
       fix=Fix("workers", sizes=True, scenarios=("data",)), data_wait=True)
def run(session: Session) -> list[Finding]:
    if not session.loaders:
        raise Skip("no DataLoader seen")
    loader = metrics.main_loader(session)
    if loader is None:
        raise Skip("no DataLoader produced a batch")
    cores = metrics.usable_cores(session)
    ranks = ranks_with_loaders(session)
    found = analyses(session).input_stall
    # too many workers for the cores, unless they sleep on I/O (light workers may outnumber the
    # cores, their CPU use still fits) and stay under the cap
    if (cores and total_workers(session) > OVERSUBSCRIBED * cores
            and (not light_workers(found) or total_workers(session) > worker_cap(cores, ranks, found) * ranks)):
        return [_too_many(session, loader, cores, ranks, found)]
    if found is None or not found.significant:
        return []
    finding = _too_few(session, loader, cores, ranks, found)
    return [finding] if finding else []


def _cap_label(found: InputStall | None) -> str:
    if light_workers(found):
        return "min(8 x cores per rank, (cores per rank - 1) / worker CPU share)"
    return "usable cores per rank - 1 (main process)"


def _too_few(session: Session, loader: LoaderInfo, cores: float | None, ranks: int,
             found: InputStall) -> Finding | None:
    plan = worker_plan(session, loader, found)
    recommended = plan.recommended
    if recommended is None or plan.prediction is None:
        return None  # enough workers, the cores already used, or workers would not help (GD102 says why)
    fetch, compute, needed, cap = plan.fetch_s, plan.compute_s, plan.needed, plan.cap
    stall_kind = found.stall.kind
    where = "in the main process" if loader.num_workers == 0 else "in a worker"
    gain = plan.prediction.gain
    evidence: dict[str, Evidence] = {
        "num_workers": Evidence(loader.num_workers, None, f"DataLoader {loader.loader_id}", "num_workers now"),
        "data_wait_share": Evidence(round(found.share * 100, 1), "%", found.window, "data wait / step time"),
        "recommended_workers": Evidence(recommended, None, None, "num_workers to set"),
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
        evidence["needed_workers"] = Evidence(needed, "workers", None, f"ceil(F / C x {HEADROOM})")
    evidence["handoff_per_batch"] = Evidence(
        _ms(plan.handoff_s), "ms", found.window if plan.handoff_measured else None,
        "the loop's cost to receive a batch from a worker" + ("" if plan.handoff_measured else " (not measured)"))

    parts = []
    if fetch is None or compute is None:
        parts.append(f"The per-batch cost was not measured; {loader.num_workers} workers is below 70% of the "
                     f"{_cores_text(cores or 0, ranks)}.")
    elif needed is not None:
        parts.append(f"Producing a batch takes {metrics.format_duration(fetch)} {where} while the loop computes for "
                     f"{metrics.format_duration(compute)} per batch, so keeping up needs ceil(F / C x {HEADROOM}) = "
                     f"{workers_text(needed)}.")
    else:
        parts.append(f"Producing a batch takes {metrics.format_duration(fetch)} {where} and the loop does almost "
                     "nothing but wait, so no worker count is too many for this load.")
    if cap is None or not cores:
        parts.append("Usable cores were not measured, so the number is not capped by them.")
    elif light_workers(found):
        parts.append(f"The workers mostly wait (CPU {found.stall.fetch_cpu_ratio:.0%} of each batch's wall "
                     f"time), so {_cores_text(cores, ranks)} carry up to {cap} of them (at most 8x the cores, one "
                     "core left for the main process).")
    else:
        parts.append(f"{_cores_text(cores, ranks)} allow at most {workers_text(cap)} (one core stays with the main "
                     "process).")
    if plan.cap_binds and cap is not None:
        how = "faster or local storage, see GD104" if stall_kind == "waiting" else "cheaper preprocessing, see GD102"
        parts.append(f"Even {workers_text(cap)} cannot keep up: each batch must also get cheaper ({how}).")
    parts.append(f"Predicted: {plan.prediction.sentence()}; {plan.prediction.detail}.")
    head = (f"DataLoader {loader.loader_id} has num_workers={loader.num_workers} and the loop waited for data "
            f"{found.share:.0%} of each step over {found.window}. ")
    if loader.num_workers == 0:
        title = "DataLoader produces batches in the main process (num_workers=0)"
    elif needed is not None:
        title = f"Too few DataLoader workers: {loader.num_workers}, about {recommended} needed"
    else:
        title = f"Too few DataLoader workers: {loader.num_workers} on {_cores_text(cores or 0, ranks)}"
    remedy_text = f"Set num_workers={recommended}"
    remedy_text += " (the most the usable cores allow) and make each batch cheaper." if plan.cap_binds else "."
    deeper = stall_kind in ("waiting", "mixed")
    return Finding(
        severity=severity_for(gain),
        title=title,
        message=head + " ".join(parts),
        evidence=evidence,
        remedy=Remedy(text=remedy_text + " Keep workers alive across epochs (persistent_workers=True)"
                      + (" and prefetch deeper, since batches mostly wait on I/O." if deeper else "."),
                      code=loader_line(loader, recommended, gpu=bool(session.torch_cuda_used),
                                       deeper_prefetch=deeper), knobs={"num_workers": "more"}),
        prediction=plan.prediction,
    )


def _too_many(session: Session, loader: LoaderInfo, cores: float, ranks: int,
              found: InputStall | None) -> Finding:
    workers = total_workers(session)
    plan: WorkerPlan | None = worker_plan(session, loader, found) if found is not None else None
    cap = worker_cap(cores, ranks, found)
    needed = plan.needed if plan is not None else None
    recommended = min(needed, cap) if needed is not None else cap
    cpu = cores_busy_percent(session, metrics.cpu_samples_steady(session))
    stalled = found is not None and found.significant
    saturated = cpu is not None and cpu >= CORES_SATURATED_PERCENT
    evidence: dict[str, Evidence] = {
        "num_workers": Evidence(loader.num_workers, None, f"DataLoader {loader.loader_id}", "num_workers now"),
        "total_workers": Evidence(workers, "workers", "whole run", "worker processes alive together"),
        **_cores_evidence(session, cores, ranks),
        "recommended_workers": Evidence(recommended, None, None, "num_workers to set"),
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
    fetch = plan.fetch_s if plan is not None else None
    compute = plan.compute_s if plan is not None else None
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
                      code=loader_line(loader, recommended, gpu=bool(session.torch_cuda_used),
                                       deeper_prefetch=False), knobs={"num_workers": "fewer"}),
        estimated_gain=None,
    )
