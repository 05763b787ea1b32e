"""NVML over one timed window: utilization, power, SM activity (GPM) of the trial's GPU.

A thin adapter over gpudoctor.collectors.nvml.NvmlSampler (the sampler `diagnose`
uses), started after warm-up and stopped when the timed loop ends, then reduced to
one GpuActivity: means over the window, the largest power reading, and every
clock-event reason seen. GPM values are averages between snapshots 100 ms apart, so
the sampler polls every 100 ms. What could not be read is a reason, never zero.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gpudoctor.collectors.nvml import NvmlResult, NvmlSampler
from gpudoctor.collectors.nvml_device import text
from gpudoctor.session import GpuSample
from gpudoctor.sweep.records import GpuActivity

POLL_INTERVAL_S = 0.1
# clock-event reasons worth reporting next to power: the ones that hold clocks down
LIMITING_REASONS = {"SwPowerCap", "HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown"}


def nvml_uuid(torch_uuid: str) -> str:
    """torch prints a device UUID bare; NVML spells it GPU-<uuid> (or MIG-<uuid>)."""
    return torch_uuid if torch_uuid.upper().startswith(("GPU-", "MIG-")) else f"GPU-{torch_uuid}"


class GpuWindowSampler:
    """start() after warm-up, stop() -> GpuActivity when the timed loop ends."""

    def __init__(
        self,
        uuid: str | None,
        interval_s: float = POLL_INTERVAL_S,
        nvml: Any = None,
        clock: Callable[[], float] = time.time,
        background: bool = True,
    ) -> None:
        self.uuid = nvml_uuid(uuid) if uuid else None
        self.background = background
        self.sampler = NvmlSampler(interval_s=interval_s, nvml=nvml, clock=clock, environ=os.environ)

    def start(self) -> None:
        self.sampler.start(background=self.background)
        if self.uuid:
            # NVML enumerates in PCI order whatever CUDA_VISIBLE_DEVICES says: match by UUID.
            self.sampler.select([self.uuid])

    def stop(self) -> GpuActivity:
        return summarize(self.sampler.stop(), self.uuid)


def _mean(samples: list[GpuSample], name: str) -> float | None:
    values = [getattr(s, name) for s in samples if getattr(s, name) is not None]
    return sum(values) / len(values) if values else None


def summarize(result: NvmlResult, uuid: str | None) -> GpuActivity:
    activity = GpuActivity()
    if "gpu" in result.unavailable:
        activity.unavailable["nvml"] = result.unavailable["gpu"]
        return activity
    wanted = uuid.lower() if uuid else None
    gpu = next((g for g in result.gpus if wanted and g.uuid.lower() == wanted), None)
    if gpu is None and len(result.gpus) == 1:
        gpu = result.gpus[0]  # a MIG slice resolves to its parent GPU
    if gpu is None:
        activity.unavailable["nvml"] = f"the trial's GPU ({uuid or 'no UUID from torch'}) was not found through NVML"
        return activity
    samples = [s for s in result.samples if s.gpu_index == gpu.index]
    activity.samples = len(samples)
    activity.util_percent_mean = _mean(samples, "util_percent")
    activity.sm_activity_percent = _mean(samples, "sm_activity")
    activity.tensor_activity_percent = _mean(samples, "tensor_activity")
    activity.dram_bw_util_percent = _mean(samples, "dram_bw_util")
    activity.power_w_mean = _mean(samples, "power_w")
    powers = [s.power_w for s in samples if s.power_w is not None]
    activity.power_w_max = max(powers) if powers else None
    activity.power_limit_w = gpu.power_limit_w
    activity.clock_event_reasons = sorted({r for s in samples for r in s.clock_event_reasons if r in LIMITING_REASONS})
    gpm_reason = result.unavailable.get("gpm") or "no GPM value in the window"
    for name in ("sm_activity_percent", "tensor_activity_percent", "dram_bw_util_percent"):
        if getattr(activity, name) is None:
            activity.unavailable[name] = gpm_reason
    for name in ("util_percent_mean", "power_w_mean"):
        if getattr(activity, name) is None:
            activity.unavailable[name] = "no NVML sample in the window" if not samples else "not reported by NVML"
    if gpu.power_limit_w is None:
        activity.unavailable["power_limit_w"] = "enforced power limit not readable"
    if "clock_events" in result.unavailable:
        activity.unavailable["clock_event_reasons"] = result.unavailable["clock_events"]
    return activity


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return text(pynvml.nvmlSystemGetDriverVersion())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001  (no driver, no library: the version is simply unknown)
        return None
