"""GD201 gpu-idle: the GPU is idle, or busy by the duty cycle while its SMs barely work.

What it detects
    Over the steady part of the run (warm-up steps excluded), the GPU did little:

    - its *duty cycle* (NVML utilization, what ``nvidia-smi`` and ``dmon``'s ``sm``
      column show) is low: most of the time no kernel ran at all; or
    - the duty cycle looks fine but the real *SM activity* (GPM, Hopper and newer)
      is low: kernels ran, but each occupied a sliver of the chip.

    It also says when the memory is full although the GPU idles: a full memory
    does not mean the GPU works (the caching allocator keeps what it once needed).

Why it matters
    NVML utilization is the share of time *at least one kernel* was running, however
    small. A loop of tiny elementwise kernels measured on an H200 read 17-31%
    utilization but 0.02-0.04% SM activity: 132 SMs, almost all of them idle. A bf16
    8192^3 matmul read 100% utilization and 93-96% SM activity. Only SM activity says
    how much of the chip works; utilization only says how often something ran.

How it is measured
    The supervisor samples NVML every 0.5 s; on GPM-capable GPUs, SM activity,
    occupancy, tensor activity and DRAM bandwidth are averages over each interval
    (two GPM snapshots at least 100 ms apart). Samples inside the steady steps'
    time window are averaged over every GPU the workload used.

Thresholds, and where they come from
    - busy share < {{BUSY_WARNING}}: a finding (warning). Busy share is the SM activity when GPM
      measured it, else the duty cycle. "Busy below 50% suggests more work per step"
      is the TensorBoard profiler plugin's line (its GPU utilization advice).
    - busy share < {{BUSY_CRITICAL}}: critical. The GPU is idle nine tenths of the time or more
      (gpudoctor's own line: at that point every other GPU-side finding is moot).
    - duty cycle {{GAP_POINTS}} or more above the SM activity: the message explains the
      gap (kernels too small to fill the GPU, see GD301).
    - memory used >= {{MEMORY_FULL}} of the device while busy share < {{BUSY_WARNING}}: "memory full but idle".
    - predicted gain (a bound): 100 / duty cycle (capped at {{MAX_GAIN}}) when the duty cycle
      is below {{BUSY_WARNING}}: the speed-up if the idle time vanished. Unknown (none) when only
      SM activity is low: filling the SMs depends on the kernels. The idle GPU is a
      symptom: a cause whose replay removes at least half of the window's idle time
      (GD102, GD301, GD302, ...) explains it and is shown first.

What to do
    Check the input pipeline first (stage 1, GD101-GD105): a starved loop idles the
    GPU whatever the model. Then give each step more work: a larger batch (GD202
    estimates how large) and fewer, bigger kernels (torch.compile or CUDA graphs
    fuse small ones, GD301).

Example
    Bad: small batch, many tiny kernels::

        loader = DataLoader(dataset, batch_size=8)
        for x, y in loader:
            loss = model(x.cuda()).relu().mul(2).add(1).mean()

    Good: more samples per step, fused kernels::

        model = torch.compile(model)
        loader = DataLoader(dataset, batch_size=256, num_workers=8, pin_memory=True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis.gpu_state import GpuActivity, in_words
from gpudoctor.analysis.prediction import bound_prediction
from gpudoctor.analysis.shared import analyses
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import Session

BUSY_WARNING = Threshold(
    "busy share below this: a warning", 50.0, "%",
    "TensorBoard profiler plugin: busy below 50% suggests more work per step")
BUSY_CRITICAL = Threshold(
    "busy share below this: critical", 10.0, "%",
    "gpudoctor: the GPU idles nine tenths of the time, every other GPU-side finding is moot")
GAP_POINTS = Threshold(
    "duty cycle this many points above SM activity: the gap is explained", 10.0, "points",
    "gpudoctor: kernels too small to fill the GPU (see GD301)")
MEMORY_FULL = Threshold(
    "memory in use for \"memory full but idle\"", 0.80, "share",
    "gpudoctor: a full memory does not mean a working GPU (playbook step 1.4)")
MAX_GAIN = Threshold(
    "cap on the predicted gain (100 / duty cycle)", 10.0, "x",
    "gpudoctor: an upper bound, not a promise")
MIN_SAMPLES = CountThreshold("GPU samples needed", 3, "samples", "gpudoctor: fewer are a transient")


@check("GD201", "gpu-idle", stage=2, title="GPU idle or SMs barely used", requires=("gpu",),
       measures_idle=True, decides="GPU activity", decides_on_gpu_runs=True,
       fix=Fix(untried="an idle GPU has no switch of its own: the findings that explain it name the change"))
def run(session: Session) -> list[Finding]:
    if session.torch_cuda_used is False:
        raise Skip("the workload put no work on a CUDA device")
    act = analyses(session).gpu_activity
    if act is None:
        raise Skip("no GPU samples were taken")
    if act.samples < MIN_SAMPLES:
        raise Skip(f"only {act.samples} GPU sample(s) in the steady window: too few to judge")
    busy = act.busy
    if busy is None:
        raise Skip("neither utilization nor SM activity was measured (MIG mode, or NVML failing)")
    if busy >= BUSY_WARNING:
        return []
    gap = _gap(act)
    parts = [_measured(act, session)]
    if gap:
        parts.append(
            f"Utilization is a duty cycle: the share of time at least one kernel was running, however "
            f"small. SM activity is the share of the streaming multiprocessors that were actually busy. "
            f"A {act.duty_cycle:.0f}% duty cycle with {act.sm_activity:.2g}% SM activity means that while "
            "kernels run, most SMs wait: the kernels are too small to fill the GPU (typically many short "
            "launches from Python, see GD301).")
    elif act.sm_activity is None:
        parts.append(f"SM activity (GPM) was not measured ({session.fact('gpm') or 'no value'}): utilization "
                     "is only a duty cycle and overstates real activity, so the real picture can only be worse.")
    share = act.memory_share
    if share is not None and share >= MEMORY_FULL:
        parts.append(f"GPU memory is {share:.0%} full, yet the GPU idles: full memory does not mean the GPU "
                     "works (PyTorch's caching allocator keeps what it once needed).")
    parts.append("A busy share below 50% suggests the GPU needs more work per step, once the input "
                 "pipeline keeps up.")
    prediction = None
    if act.duty_cycle is not None and act.duty_cycle < BUSY_WARNING:
        gain = min(MAX_GAIN, 100.0 / max(act.duty_cycle, 100.0 / MAX_GAIN))
        prediction = bound_prediction(session, gain, "if the GPU never idled",
                                      f"1 / duty cycle ({act.duty_cycle:.0f}%), at most {MAX_GAIN:.0f}x: the GPU "
                                      "busy all the time with the same work")
    severity = "critical" if busy < BUSY_CRITICAL else "warning"
    return [Finding(severity=severity, title=_title(act, gap), message=" ".join(parts),
                    evidence=_evidence(act), remedy=REMEDY, prediction=prediction)]


def _gap(act: GpuActivity) -> bool:
    if act.duty_cycle is None or act.sm_activity is None:
        return False
    return act.duty_cycle - act.sm_activity >= GAP_POINTS


def _title(act: GpuActivity, gap: bool) -> str:
    if act.duty_cycle is not None and act.duty_cycle >= BUSY_WARNING:
        return "GPU looks busy, but its SMs are mostly idle"
    if gap:
        return "GPU mostly idle, and its SMs barely work when it runs"
    return "GPU mostly idle"


def _measured(act: GpuActivity, session: Session) -> str:
    gpus = "GPU " + ", ".join(str(i) for i in act.gpus)
    values = []
    if act.duty_cycle is not None:
        values.append(f"NVML utilization (duty cycle) averaged {act.duty_cycle:.0f}%")
    if act.sm_activity is not None:
        values.append(f"GPM SM activity {act.sm_activity:.2g}%")
    if act.tensor_activity is not None:
        values.append(f"tensor-core activity {act.tensor_activity:.2g}%")
    return f"Over {in_words(act.window)} ({act.samples} samples, {gpus}), " + ", ".join(values) + "."


def _evidence(act: GpuActivity) -> dict[str, Evidence]:
    w = act.window
    out: dict[str, Evidence] = {"samples": Evidence(act.samples, "samples", w, "GPU samples")}
    for key, value, label in (
        ("util_percent", act.duty_cycle, "NVML utilization (duty cycle), mean"),
        ("sm_activity", act.sm_activity, "GPM SM activity, mean"),
        ("tensor_activity", act.tensor_activity, "GPM tensor-core activity, mean"),
        ("sm_occupancy", act.sm_occupancy, "GPM SM occupancy, mean"),
        ("dram_bw_util", act.dram_bw_util, "GPM DRAM bandwidth used, mean"),
    ):
        if value is not None:
            out[key] = Evidence(round(value, 3), "%", w, label)
    if act.memory_used_peak is not None:
        out["memory_used_peak"] = Evidence(round(act.memory_used_peak / 2**30, 2), "GiB", w, "GPU memory used, peak")
    if act.memory_share is not None:
        out["memory_used_share"] = Evidence(round(act.memory_share * 100, 1), "%", w, "of device memory")
    return out


REMEDY = Remedy(
    text="First make sure the input pipeline keeps up (stage 1: GD101-GD105). Then give each step more "
    "work: a larger batch (GD202 estimates how large it can be) and fewer, bigger kernels: torch.compile "
    "or CUDA graphs fuse the small ones (GD301).",
    code="model = torch.compile(model)  # fuses small kernels, fewer launches\n"
    "loader = DataLoader(dataset, batch_size=4 * B, num_workers=W, pin_memory=True)  # if memory allows (GD202)",
)
