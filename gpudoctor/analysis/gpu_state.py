"""Is the GPU fully used? The verdict starts from this question.

A GPU is fully used when its multiprocessors are busy most of the time, or when it
draws its power budget while a kernel runs nearly all the time:

- GPM SM activity >= 80%: NVIDIA's DCGM profiling guide calls an SM activity of
  0.8 or more necessary for effective use of the GPU (a duty cycle says nothing
  about it: one tiny kernel keeps the duty cycle at 100%).
- power >= 90% of the enforced limit with a duty cycle >= 90%, or the SwPowerCap
  clock-event reason in most busy samples: the chip runs at its power budget
  (the playbook: 80-90% of the rated power under load means near fully used).

Then nothing on the host can make the run faster; only cheaper work can
(precision, batch, fusion), and no finding is critical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import GpuSample, Session

SM_ACTIVITY_FULL = Threshold(
    "SM activity of a fully used GPU", 80.0, "%",
    "DCGM: 80% SM activity is necessary for effective use")
POWER_SHARE_FULL = Threshold(
    "power of a fully used GPU", 0.90, "share",
    "playbook: 80-90% of the rated limit under load is a fully used chip")
DUTY_CYCLE_BUSY = Threshold(
    "duty cycle of a busy GPU", 90.0, "%",
    "gpudoctor: a kernel ran nearly all the time")
POWER_CAP_REASON = "SwPowerCap"
REASON_MAJORITY = Threshold(
    "share of samples with the power-cap reason", 0.5, "share",
    "gpudoctor: most of the busy samples")
MIN_SAMPLES = CountThreshold(
    "GPU samples needed to judge the load", 3, "samples",
    "gpudoctor: fewer are a transient")


@dataclass(frozen=True)
class GpuLoad:
    """Steady-state activity of the GPUs the workload used."""

    samples: int
    duty_cycle: float | None  # NVML utilization, %
    sm_activity: float | None  # GPM, %
    tensor_activity: float | None  # GPM, %
    power_w: float | None
    power_limit_w: float | None
    power_capped_share: float  # share of samples with the SwPowerCap reason

    @property
    def busy_share(self) -> float | None:
        """Share of the time the GPU was busy: the duty cycle, or SM activity where that is higher."""
        values = [v for v in (self.duty_cycle, self.sm_activity) if v is not None]
        return max(values) / 100.0 if values else None

    @property
    def power_share(self) -> float | None:
        if self.power_w is None or not self.power_limit_w:
            return None
        return self.power_w / self.power_limit_w

    @property
    def fully_used(self) -> bool:
        if self.samples < MIN_SAMPLES:
            return False
        if self.sm_activity is not None and self.sm_activity >= SM_ACTIVITY_FULL:
            return True
        busy = self.duty_cycle is not None and self.duty_cycle >= DUTY_CYCLE_BUSY
        at_power = (self.power_share is not None and self.power_share >= POWER_SHARE_FULL) or \
            self.power_capped_share >= REASON_MAJORITY
        # a duty cycle alone never proves it (tiny kernels read 100%): power must agree
        return busy and at_power and (self.sm_activity is None or self.sm_activity >= SM_ACTIVITY_FULL / 2)

    def describe(self) -> str:
        """'SM activity 92%, tensor-core activity 80%, power 690 of 700 W'."""
        parts = []
        if self.sm_activity is not None:
            parts.append(f"SM activity {self.sm_activity:.0f}%")
        if self.tensor_activity is not None and self.tensor_activity >= 1:
            parts.append(f"tensor-core activity {self.tensor_activity:.0f}%")
        if self.sm_activity is None and self.duty_cycle is not None:
            parts.append(f"utilization {self.duty_cycle:.0f}%")
        if self.power_w is not None and self.power_limit_w:
            parts.append(f"power {self.power_w:.0f} of {self.power_limit_w:.0f} W")
        return ", ".join(parts)


def gpu_load(session: Session) -> GpuLoad | None:
    """The steady GPU samples' means, or None when the GPU was not sampled."""
    if session.torch_cuda_used is False:
        return None
    samples = metrics.gpu_samples_steady(session)
    if not samples:
        return None
    used = {s.gpu_index for s in samples}
    limits = [g.power_limit_w for g in session.environment.gpus if g.index in used and g.power_limit_w]
    return GpuLoad(
        samples=len(samples),
        duty_cycle=metrics.gpu_metric_mean(samples, "util_percent"),
        sm_activity=metrics.gpu_metric_mean(samples, "sm_activity"),
        tensor_activity=metrics.gpu_metric_mean(samples, "tensor_activity"),
        power_w=metrics.gpu_metric_mean(samples, "power_w"),
        power_limit_w=float(min(limits)) if limits else None,
        power_capped_share=sum(POWER_CAP_REASON in s.clock_event_reasons for s in samples) / len(samples),
    )


def fully_used(session: Session) -> GpuLoad | None:
    """The GPU's load when it was fully used, else None."""
    load = gpu_load(session)
    return load if load is not None and load.fully_used else None


@dataclass(frozen=True)
class GpuActivity:
    samples: int
    gpus: list[int]
    duty_cycle: float | None  # NVML utilization, %
    sm_activity: float | None  # GPM, %
    tensor_activity: float | None
    sm_occupancy: float | None
    dram_bw_util: float | None
    memory_used_peak: int | None
    memory_total: int | None
    window: str

    @property
    def busy(self) -> float | None:
        return self.sm_activity if self.sm_activity is not None else self.duty_cycle

    @property
    def memory_share(self) -> float | None:
        if self.memory_used_peak is None or not self.memory_total:
            return None
        return self.memory_used_peak / self.memory_total


def gpu_activity(session: Session) -> GpuActivity | None:
    """Steady-state GPU activity of the GPUs the workload used, or None without samples."""
    samples: list[GpuSample] = metrics.gpu_samples_steady(session)
    if not samples:
        return None
    summary = metrics.step_summary(session)
    window = summary.window if summary else "whole run"
    indexes = sorted({s.gpu_index for s in samples})
    totals = {g.index: g.memory_total_bytes for g in session.environment.gpus if g.memory_total_bytes}
    peaks = [s.memory_used_bytes for s in samples if s.memory_used_bytes is not None]
    peak_gpu = max((s for s in samples if s.memory_used_bytes is not None),
                   key=lambda s: s.memory_used_bytes or 0, default=None)
    return GpuActivity(
        samples=len(samples),
        gpus=indexes,
        duty_cycle=metrics.gpu_metric_mean(samples, "util_percent"),
        sm_activity=metrics.gpu_metric_mean(samples, "sm_activity"),
        tensor_activity=metrics.gpu_metric_mean(samples, "tensor_activity"),
        sm_occupancy=metrics.gpu_metric_mean(samples, "sm_occupancy"),
        dram_bw_util=metrics.gpu_metric_mean(samples, "dram_bw_util"),
        memory_used_peak=max(peaks) if peaks else None,
        memory_total=totals.get(peak_gpu.gpu_index) if peak_gpu is not None else None,
        window=window,
    )


def in_words(window: str) -> str:
    """'whole run' -> 'the whole run' inside a sentence."""
    return "the " + window if window.startswith("whole") else window
