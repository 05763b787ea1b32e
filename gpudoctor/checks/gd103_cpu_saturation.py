"""GD103 cpu-saturation: the CPU is the bottleneck while the GPU idles.

What it detects
    One of two CPU limits, while the loop waits for data or the GPU sits idle:

    - **All usable cores busy**: the cores the workload may use (CPU affinity and
      cgroup quota) are >= 90% busy on average in steady state. Preprocessing (or
      something else on the machine) needs more CPU than there is; adding workers
      only adds contention.
    - **Main Python thread pegged**: the training loop's own thread uses a full
      core (>= 90%) while the other cores have room. The loop is Python-bound: it
      cannot issue GPU work (or, with ``num_workers=0``, produce batches) any faster.

    Idle CPUs while the loader stalls is *not* this check, and neither is a busy
    machine when the batch producers are measured waiting (sleeping on I/O): that is waiting on
    storage, network or a sleep (GD102 classifies it, GD104 looks at storage).

Why it matters
    A GPU only works on what the CPU queues for it. When the CPU is full, a faster GPU,
    a bigger model or more workers change nothing; the CPU work per step must shrink
    or move elsewhere.

How it is measured
    The supervisor samples the CPU with psutil during the run: busy share across the
    cores of the workload's affinity, the process tree, the main process and its main
    thread, and the DataLoader workers. Only samples inside the steady steps count.
    "Cores busy" is the higher of the machine's busy share and the workload's own use
    of its usable cores: under a cgroup quota smaller than the affinity (containers,
    Slurm, Kubernetes limits) the machine looks idle while the job is throttled. The
    impact comes from the data-wait share (GD102) and the GPU's duty cycle (NVML).

Thresholds, and where they come from
    - Cores busy >= {{CORES_SATURATED_PERCENT}} (mean): psutil's system-wide busy share rarely exceeds
      90-95% even when every core is runnable, because of interrupts and scheduler
      idle moments; 90% is "no room left".
    - Main thread >= {{MAIN_THREAD_PEGGED_PERCENT}} of one core: the same margin, for a single thread. Note that
      a thread waiting in ``cudaStreamSynchronize`` also spins at 100%, so a pegged
      main thread counts only while the GPU idles or the loop waits for data.
    - Impact: data wait >= {{WAIT_SHARE_WARNING}} of step time (TensorBoard profiler plugin, as GD102), or
      GPU duty cycle below {{GPU_IDLE_UTIL_PERCENT}} (the TensorBoard plugin's "busy below 50%" line).
      Critical when the data wait reaches {{WAIT_SHARE_CRITICAL}} (GD102's critical line). When neither
      was measured the saturation is reported as a note.
    - Full cores are not the workload's when it runs ``num_workers=0`` and leaves at least
      {{WORKLOAD_ROOM_CORES}} of the usable cores to others: its main process makes the batches on one core,
      so with that thread pegged the finding is the main thread's (move batch production to a
      worker, GD101), never "do not add workers". Issue 26: such a run on 2 cores read 100% busy
      and ran 1.87x faster with ``num_workers=1``.

What to do
    - Cores: make each sample cheaper (decode/resize once offline and store ready
      tensors, smaller inputs, faster decoders), run random augmentation on the GPU on
      whole batches, and keep ``num_workers`` at most the usable cores. If other
      processes use most of the CPU, move them or give the job more cores.
    - Main thread: move batch production off it (``num_workers > 0``, GD101), and cut
      Python work per step: ``torch.compile`` or CUDA graphs (fewer launches), a
      bigger batch (the per-step overhead is amortised), no per-step ``.item()`` /
      logging of tensors.

Example
    Bad: heavy per-sample CPU augmentation on 8 saturated cores::

        transform = T.Compose([T.RandomResizedCrop(224), T.ColorJitter(0.4, 0.4, 0.4),
                               T.GaussianBlur(23), T.ToTensor()])

    Good: workers only decode; augmentation runs batched on the GPU::

        transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
        for images, labels in loader:
            images = gpu_augment(images.to("cuda", non_blocking=True))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.input_pipeline import (
    CORES_SATURATED_PERCENT,
    STALL_LIMITS,
    InputStall,
    cores_busy_percent,
    data_prediction,
    loader_line,
    worker_plan,
    workload_cores,
)
from gpudoctor.analysis.prediction import SEVERITY_GAINS, predict, severity_for
from gpudoctor.analysis.shared import analyses
from gpudoctor.model import Evidence, Finding, Fix, Prediction, Remedy, Skip, check
from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:
    from gpudoctor.session import CpuSample, Session

MAIN_THREAD_PEGGED_PERCENT = Threshold(
    "main thread busy: pegged at or above", 90.0, "% of one core",
    "the same margin as for the cores (psutil); a thread in cudaStreamSynchronize also spins at"
    " 100%")
GPU_IDLE_UTIL_PERCENT = Threshold(
    "GPU duty cycle below this: the GPU idles", 50.0, "%",
    "TensorBoard profiler plugin: busy below 50% means more work per step")
OTHER_PROCESSES_SHARE = Threshold(
    "the workload uses less than this share of the busy CPU: other processes", 0.5, "share",
    "gpudoctor: the saturation is someone else's")
WORKLOAD_ROOM_CORES = Threshold(
    "with num_workers=0, the workload leaves at least this much of the usable cores to others: not full "
    "by its own work", 0.5, "cores",
    "a worker process needs a core's share; with num_workers=0 the main process producing batches pegs one "
    "core, not all (a 2-core run measured 1.87x faster with num_workers=1 while the cores read 100% busy)")


# the trials' remedies for the findings that are not the Python-bound loop (Check.fix)
CORES_FULL = Fix(untried="the usable cores are full: each sample must get cheaper in the code (more workers would "
                         "compete for the same cores)")
IN_PROCESS_BATCHES = Fix("workers")


@check("GD103", "cpu-saturation", stage=1, title="CPU saturation",
       requires=("cpu",), explains=("GD201", "GD202", "GD203"),
       thresholds=(*STALL_LIMITS, *SEVERITY_GAINS),
       fix=Fix("compile", scenarios=("data", "launch")), data_wait=True)
def run(session: Session) -> list[Finding]:
    samples = metrics.cpu_samples_steady(session)
    if not samples:
        raise Skip("no CPU samples in the run")
    busy, main_thread, cores_saturated, main_pegged = _saturation(session, samples)
    if not (cores_saturated or main_pegged):
        return []

    found = analyses(session).input_stall if session.loaders else None
    gpu_util = metrics.gpu_metric_mean(metrics.gpu_samples_steady(session), "util_percent")
    if found is None and gpu_util is None:
        # a CPU-only loop with no DataLoader: the CPU *is* the compute engine, nothing waits on it
        raise Skip("no DataLoader and no GPU utilization measured: nothing that a busy CPU could starve")
    prediction = data_prediction(session, found) if found is not None and found.significant else None
    # a wait only counts when it costs the step time (queued GPU work can hide it, GD102)
    stalled = found is not None and prediction is not None and severity_for(prediction.gain) != "info"
    gpu_idle = gpu_util is not None and gpu_util < GPU_IDLE_UTIL_PERCENT
    if _nothing_waits(found, gpu_util, stalled, gpu_idle, main_pegged):
        return []

    window = found.window if found else _window(session)
    cores = metrics.usable_cores(session)
    tree = workload_cores(samples)
    evidence = _evidence(samples, window, cores_saturated, busy, cores, main_thread, tree, found, gpu_util)

    impact = _impact_text(found, gpu_util, stalled, gpu_idle)
    severity, shown = _severity(session, found is not None or gpu_util is not None, stalled, prediction,
                                python_bound=not cores_saturated and not stalled and gpu_idle)
    if cores_saturated:
        return [_cores_finding(session, severity, busy, cores, tree, impact, window, evidence, shown)]
    return [_main_thread_finding(session, severity, main_thread or 0.0, busy, impact, window, evidence, shown)]


def _saturation(session: Session, samples: list[CpuSample]) -> tuple[float, float | None, bool, bool]:
    """The usable cores' busy percent, the main thread's, and which of the two is saturated."""
    busy = cores_busy_percent(session, samples) or 0.0
    main_thread = metrics.mean([s.main_thread_percent for s in samples if s.main_thread_percent is not None])
    cores_saturated = busy >= CORES_SATURATED_PERCENT
    main_pegged = main_thread is not None and main_thread >= MAIN_THREAD_PEGGED_PERCENT
    if cores_saturated and main_pegged and _main_process_makes_batches_on_spare_cores(session, samples):
        cores_saturated = False  # the main thread is the limit, not the cores: a worker has room
    return busy, main_thread, cores_saturated, main_pegged


def _nothing_waits(found: InputStall | None, gpu_util: float | None, stalled: bool, gpu_idle: bool,
                   main_pegged: bool) -> bool:
    """The CPU is busy but nothing waits on it: no finding."""
    if (found is not None or gpu_util is not None) and not (stalled or gpu_idle):
        return True  # the CPU is busy, but the GPU is fed: nothing waits on it
    # batches are late because their producers sleep on storage/network, not for want
    # of a CPU: a busy machine is not what stalls this loop (GD102/GD104 tell it)
    return stalled and found is not None and found.stall.kind == "waiting" and not main_pegged


def _severity(session: Session, impact_measured: bool, stalled: bool, prediction: Prediction | None,
              python_bound: bool) -> tuple[str, Prediction | None]:
    """The finding's severity and the prediction it shows: the data wait's when the loop stalled;
    for a Python-bound loop starving the GPU, what cutting its Python and launch work would buy."""
    if not impact_measured:
        severity = "info"
    elif stalled and prediction is not None:
        severity = severity_for(prediction.gain)
    else:
        severity = "warning"
    shown = prediction if stalled else None
    if python_bound:
        shown = predict(session, "launch", host_side=True, label="if the loop's framework Python and launches "
                        "were one captured graph per chain")
        if shown is not None:
            severity = severity_for(shown.gain)
    return severity, shown


def _evidence(samples: list[CpuSample], window: str, cores_saturated: bool, busy: float, cores: float | None,
              main_thread: float | None, tree: float | None, found: InputStall | None,
              gpu_util: float | None) -> dict[str, Evidence]:
    """The finding's evidence: what is saturated, and each CPU and GPU number that was measured."""
    evidence: dict[str, Evidence] = {
        "saturation": Evidence("cores" if cores_saturated else "main-thread", None, window, "what is saturated"),
        "cpu_busy": Evidence(round(busy, 1), "%", window, "usable cores busy (mean)"),
    }
    if cores:
        evidence["usable_cores"] = Evidence(round(cores, 2), "cores", "whole run", "usable cores (affinity, quota)")
    if main_thread is not None:
        evidence["main_thread"] = Evidence(round(main_thread, 1), "% of one core", window, "main Python thread")
    if tree is not None:
        evidence["workload_cpu"] = Evidence(round(tree, 2), "cores", window, "whole process tree")
    workers = metrics.mean([s.workers_percent for s in samples if s.workers_percent is not None])
    if workers is not None:
        evidence["workers_cpu"] = Evidence(round(workers / 100.0, 2), "cores", window, "DataLoader workers")
    if found is not None:
        evidence["data_wait_share"] = Evidence(round(found.share * 100, 1), "%", found.window, "data wait / step time")
    if gpu_util is not None:
        evidence["gpu_util"] = Evidence(round(gpu_util, 1), "%", window, "GPU utilization (mean)")
    return evidence


def _main_process_makes_batches_on_spare_cores(session: Session, samples: list[CpuSample]) -> bool:
    """num_workers=0 and the workload's own processes leave a core's share to spare: the busy
    cores are the main process producing batches (one core) plus others, not preprocessing
    that fills them all."""
    loader = metrics.main_loader(session)
    cores = metrics.usable_cores(session)
    tree = workload_cores(samples)
    return (loader is not None and loader.num_workers == 0 and cores is not None and tree is not None
            and cores - tree >= WORKLOAD_ROOM_CORES)


def _window(session: Session) -> str:
    summary = metrics.step_summary(session)
    return summary.window if summary else "whole run"


def _impact_text(found: InputStall | None, gpu_util: float | None, stalled: bool, gpu_idle: bool) -> str:
    parts = []
    if stalled and found is not None:
        parts.append(f"the loop waited for data {found.share:.0%} of each step")
    if gpu_idle and gpu_util is not None:
        parts.append(f"the GPU was busy only {gpu_util:.0f}% of the time")
    if not parts:
        return "Whether it slowed the GPU was not measured (no step times, loader wait or GPU samples)."
    return "Meanwhile " + " and ".join(parts) + "."


def _cores_finding(session: Session, severity: str, system: float, cores: float | None, tree: float | None,
                   impact: str, window: str, evidence: dict[str, Evidence], prediction: Prediction | None) -> Finding:
    cores_text = f" ({cores:g})" if cores else ""
    tree_text = f"; the workload's own processes used {tree:.1f} cores" if tree is not None else ""
    message = f"The usable cores{cores_text} were {system:.0f}% busy on average over {window}{tree_text}. {impact}"
    busy_cores = system / 100.0 * cores if cores else None
    cheaper = ("make each sample cheaper (decode/resize once offline and store ready tensors, smaller inputs, "
               "a faster decoder)" + (" and run random augmentation on the GPU on whole batches." if
                                      session.torch_cuda_used else "."))
    knob: str | None
    if busy_cores and tree is not None and tree < OTHER_PROCESSES_SHARE * busy_cores:
        message += (f" The workload itself used only {tree:.1f} of the {busy_cores:.1f} busy cores: "
                    "other processes on the machine take the rest.")
        text = ("Other processes use most of the CPU: move them off this machine, or give the job more cores "
                "(CPU affinity, cgroup quota). Then make each sample cheaper.")
        knob = None
    else:
        text = "Preprocessing needs more CPU than the job has. Do not add workers (the cores are full): " + cheaper
        knob = "keep"
    loader = metrics.main_loader(session)
    workers = loader.num_workers if loader else None
    if session.torch_cuda_used:
        code = ("# workers only decode; augmentation runs on whole batches on the GPU\n"
                "for images, labels in loader:\n"
                "    images = gpu_augment(images.to(\"cuda\", non_blocking=True))  # torchvision.transforms.v2 on CUDA")
    else:
        code = ("# decode and resize once, offline; store ready tensors and load those\n"
                "torch.save(preprocessed_tensors, \"train-ready.pt\")")
    if workers and cores and workers > cores:
        text += f" Also bring num_workers={workers} down to at most {max(1, int(cores) - 1)} (see GD101)."
        knob = "fewer"
    waiting = " while the GPU waits" if session.torch_cuda_used else " while the loop waits for data"
    title = f"CPU saturated: usable cores {system:.0f}% busy" + (waiting if severity != "info" else "")
    remedy = Remedy(text=text, code=code, fix=CORES_FULL)
    if knob is not None:  # where the workers' own check sizes them otherwise, only the cheaper samples stand
        remedy = Remedy(text=text, code=code, knobs={"num_workers": knob}, fix=CORES_FULL,
                        without_knobs=Remedy(text="The CPU is the limit: " + cheaper, code=code, fix=CORES_FULL))
    return Finding(severity=severity, title=title,
                   message=message, evidence=evidence, remedy=remedy, prediction=prediction)


def _main_thread_finding(session: Session, severity: str, main_thread: float, system: float, impact: str,
                         window: str, evidence: dict[str, Evidence], prediction: Prediction | None) -> Finding:
    head = (f"The main Python thread used {main_thread:.0f}% of one core over {window} while the usable "
            f"cores were only {system:.0f}% busy")
    loader = metrics.main_loader(session)
    found = analyses(session).input_stall if loader is not None else None
    plan = worker_plan(session, loader, found) if loader is not None and found is not None else None
    knobs: dict[str, str] = {}
    if loader is not None and loader.num_workers == 0:
        title = f"Main Python thread pegged at {main_thread:.0f}% of a core, producing batches itself"
        message = (f"{head}: with num_workers=0 it produces every batch itself, in series with the training "
                   f"step. {impact}")
        if plan is not None and plan.recommended is not None:
            text = (f"Move batch production off the main thread (num_workers={plan.recommended}, sized from this "
                    "run's measurements), then cut per-step Python work.")
            code = loader_line(loader, plan.recommended, gpu=bool(session.torch_cuda_used), deeper_prefetch=False)
            knobs = {"num_workers": "more"}
        else:
            why = f" ({plan.why_not})" if plan is not None and plan.why_not else ""
            text = (f"Make each batch cheaper: workers would not pay for their hand-off here{why}. Index whole "
                    "batches at once instead of per item, and cut per-step Python work.")
            code = None
            knobs = {"num_workers": "keep"}
    else:
        title = f"Main Python thread pegged at {main_thread:.0f}% of a core: the loop is Python-bound"
        message = f"{head}: the training loop itself is the bottleneck. {impact}"
        text = ("Cut Python work per step: compile the model (torch.compile, or CUDA graphs) so one call "
                "issues many kernels, use a bigger batch to amortise per-step overhead, and avoid per-step "
                ".item()/printing of tensors.")
        code = "model = torch.compile(model)  # fewer, fused kernel launches per step"
    # batches made in the main thread move to workers; a Python-bound loop takes the check's fix (compile)
    fix = IN_PROCESS_BATCHES if loader is not None and loader.num_workers == 0 else None
    return Finding(severity=severity, title=title, message=message, evidence=evidence,
                   remedy=Remedy(text=text, code=code, knobs=knobs, fix=fix), prediction=prediction)
