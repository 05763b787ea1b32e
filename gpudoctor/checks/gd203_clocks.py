"""GD203 clocks-held: SM clocks held down under load (thermal, hardware slowdown, power cap).

What it detects
    While the GPU is busy, NVML's clock-event ("throttle") reasons say why the SM
    clock is below its maximum:

    - ``HwSlowdown``, ``HwThermalSlowdown``, ``SwThermalSlowdown``,
      ``HwPowerBrakeSlowdown``: the GPU protects itself (too hot, external power
      brake signal from the system, power supply trouble). A **warning**: the same
      code runs slower than the chip can, and the cause is outside the program.
    - ``SwPowerCap``: the chip draws its enforced power limit and the driver lowers the
      clocks to stay under it. Under a heavy load this means the chip is **fully
      used** (bf16 8192^3 matmuls on an H200: 631-692 W of 700 W, SM activity 93-96%,
      SwPowerCap in every sample, SM clock about 1480 of 1980 MHz): it is reported as
      **info**, not a problem.
    - Without GPM: utilization says busy but power stays far below the limit. A fully
      used chip draws 80-90% of its limit or more (playbook, step 4); far below it,
      the "busy" GPU mostly runs small kernels (info; GD201 says it with SM activity
      when GPM is available, so this note is only made without it).

Why it matters
    Compute-bound kernels run at most in proportion to the SM clock. A GPU throttled
    to 60% of its clock for half the run loses up to a quarter of its speed whatever
    the code does.

How it is measured
    NVML samples (every 0.5 s): clock-event reasons (a bit mask, decoded), SM clock
    and its maximum, power draw and the enforced power limit. Only *busy* samples
    count (utilization >= 50%, or SM activity >= 50% where utilization is missing):
    an idle GPU lowers its clocks on purpose (``Idle``).

Thresholds, and where they come from
    - a reason present in >= {{REASON_SHARE}} of busy samples is reported (gpudoctor's own line:
      a single 0.5 s sample is a transient, a tenth of the busy time is not).
    - estimated gain for slowdowns: ``1 / (1 - s + s * clock / max_clock)`` with ``s``
      the share of busy samples slowed and ``clock`` their mean SM clock: the speed-up
      if those samples ran at the maximum clock, an upper bound (compute-bound code).
    - power-cap "fully used": SM activity >= {{SM_ACTIVITY_FULL}} or power >= {{POWER_SHARE_FULL}} of the limit in the
      capped samples (playbook: 80-90% of the limit under load is a fully used chip).
    - power far below the limit: mean power < {{LOW_POWER_SHARE}} of the limit in samples with
      utilization >= {{LOW_POWER_UTIL}}, without GPM.

What to do
    - Thermal / HW slowdown: check cooling (airflow, fan failures, inlet
      temperature), the power supply and cabling; ``nvidia-smi -q -d PERFORMANCE,TEMPERATURE``
      shows the live reasons; involve whoever runs the machine.
    - Power cap: nothing is wrong. A higher limit (``nvidia-smi -pl``, admin only, up
      to the board's maximum) or less energy per result (bf16, fused kernels) are
      the only levers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.gpu_state import POWER_SHARE_FULL, SM_ACTIVITY_FULL
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check
from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:
    from gpudoctor.session import GpuInfo, GpuSample, Session

BUSY_PERCENT = Threshold(
    "utilization (or SM activity) at which clocks matter", 50.0, "%",
    "gpudoctor: clocks only matter under load")
REASON_SHARE = Threshold(
    "share of busy samples with a clock-event reason before it is reported", 0.10, "share",
    "gpudoctor: one 0.5 s sample is a transient, a tenth of the busy time is not")
SLOWDOWNS = ("HwSlowdown", "HwThermalSlowdown", "SwThermalSlowdown", "HwPowerBrakeSlowdown")
POWER_CAP = "SwPowerCap"
LOW_POWER_SHARE = Threshold(
    "mean power below this share of the limit while busy: small kernels", 0.50, "share",
    "gpudoctor; idle H200 measured at about 121 W of 700 W")
LOW_POWER_UTIL = Threshold(
    "utilization at which the GPU claims to be busy", 90.0, "%",
    "NVML's duty cycle (not SM activity)")


@dataclass(frozen=True)
class ReasonStats:
    share: float  # of busy samples
    samples: list[GpuSample]
    gpus: list[int]
    clock_mhz: float | None  # mean SM clock in those samples
    clock_max_mhz: float | None
    power_w: float | None
    power_limit_w: float | None
    sm_activity: float | None
    temperature_c: float | None


def busy_samples(session: Session) -> list[GpuSample]:
    out = []
    for s in metrics.gpu_samples_steady(session):
        level = s.util_percent if s.util_percent is not None else s.sm_activity
        if level is not None and level >= BUSY_PERCENT:
            out.append(s)
    return out


def reason_stats(busy: list[GpuSample], names: tuple[str, ...], gpus: dict[int, GpuInfo]) -> ReasonStats:
    hit = [s for s in busy if any(r in names for r in s.clock_event_reasons)]
    indexes = sorted({s.gpu_index for s in hit})
    maxima = [m for m in (gpus[i].sm_clock_max_mhz for i in indexes if i in gpus) if m]
    limits = [w for w in (gpus[i].power_limit_w for i in indexes if i in gpus) if w]
    return ReasonStats(
        share=len(hit) / len(busy),
        samples=hit,
        gpus=indexes,
        clock_mhz=metrics.gpu_metric_mean(hit, "sm_clock_mhz"),
        clock_max_mhz=float(max(maxima)) if maxima else None,
        power_w=metrics.gpu_metric_mean(hit, "power_w"),
        power_limit_w=float(min(limits)) if limits else None,
        sm_activity=metrics.gpu_metric_mean(hit, "sm_activity"),
        temperature_c=metrics.gpu_metric_mean(hit, "temperature_c"),
    )


@check("GD203", "clocks-held", stage=2, title="Clocks held down (power cap, thermal or HW slowdown)",
       requires=("gpu",),
       fix=Fix(untried="clocks and power limits belong to the machine's administrator"))
def run(session: Session) -> list[Finding]:
    if session.fact("clock_events"):
        raise Skip(session.fact("clock_events") or "clock-event reasons not read")
    busy = busy_samples(session)
    if not busy:
        raise Skip("the GPU was never busy (utilization >= 50%) in the steady window: clocks only matter under load")
    summary = metrics.step_summary(session)
    window = (summary.window if summary else "whole run") + f", {len(busy)} busy samples"
    gpus = {g.index: g for g in session.environment.gpus}
    findings = []
    slow = reason_stats(busy, SLOWDOWNS, gpus)
    if slow.samples and slow.share >= REASON_SHARE:
        findings.append(_slowdown(slow, window))
    cap = reason_stats(busy, (POWER_CAP,), gpus)
    if cap.samples and cap.share >= REASON_SHARE:
        findings.append(_power_cap(cap, window))
    elif session.fact("gpm") or all(s.sm_activity is None for s in busy):
        low = _low_power(busy, gpus, window)
        if low is not None:
            findings.append(low)
    return findings


def _clock_text(stats: ReasonStats) -> str:
    if stats.clock_mhz is None:
        return "SM clock not measured"
    if stats.clock_max_mhz:
        return f"SM clock {stats.clock_mhz:.0f} MHz of {stats.clock_max_mhz:.0f} MHz"
    return f"SM clock {stats.clock_mhz:.0f} MHz"


def _evidence(stats: ReasonStats, window: str) -> dict[str, Evidence]:
    out = {"share_of_busy_samples": Evidence(round(stats.share * 100, 1), "%", window, "busy samples affected")}
    for key, value, unit, label in (
        ("sm_clock", stats.clock_mhz, "MHz", "SM clock in those samples, mean"),
        ("sm_clock_max", stats.clock_max_mhz, "MHz", "maximum SM clock"),
        ("power", stats.power_w, "W", "power draw in those samples, mean"),
        ("power_limit", stats.power_limit_w, "W", "enforced power limit"),
        ("sm_activity", stats.sm_activity, "%", "GPM SM activity in those samples, mean"),
        ("temperature", stats.temperature_c, "C", "GPU temperature in those samples, mean"),
    ):
        if value is not None:
            out[key] = Evidence(round(value, 1), unit, window, label)
    return out


def _slowdown(stats: ReasonStats, window: str) -> Finding:
    reasons = sorted({r for s in stats.samples for r in s.clock_event_reasons if r in SLOWDOWNS})
    gain = None
    if stats.clock_mhz and stats.clock_max_mhz and stats.clock_mhz < stats.clock_max_mhz:
        gain = round(1.0 / (1.0 - stats.share + stats.share * stats.clock_mhz / stats.clock_max_mhz), 2)
    temp = f", {stats.temperature_c:.0f} C" if stats.temperature_c is not None else ""
    message = (f"In {stats.share:.0%} of the busy samples on GPU {', '.join(map(str, stats.gpus))}, NVML reported "
               f"{', '.join(reasons)} ({_clock_text(stats)}{temp}). The GPU is protecting itself from heat or a "
               "power problem; the same code runs slower than the chip can, and the cause is outside the "
               "program.")
    if gain:
        message += f" At full clock, compute-bound work would run up to {gain:.2f}x faster."
    return Finding(
        severity="warning",
        title=f"Clocks held down by {', '.join(reasons)}",
        message=message,
        evidence=_evidence(stats, window),
        remedy=Remedy(
            text="Check cooling (airflow, failed fans, inlet temperature), the power supply and its cabling; "
            "ask whoever runs the machine. HwPowerBrakeSlowdown is a signal from the system board, not the GPU.",
            code="nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER   # live reasons, temperatures, limits",
        ),
        estimated_gain=gain,
    )


def _power_cap(stats: ReasonStats, window: str) -> Finding:
    power = ""
    power_share = None
    if stats.power_w is not None and stats.power_limit_w:
        power_share = stats.power_w / stats.power_limit_w
        power = f", drawing {stats.power_w:.0f} W of its {stats.power_limit_w:.0f} W limit ({power_share:.0%})"
    activity = f", SM activity {stats.sm_activity:.0f}%" if stats.sm_activity is not None else ""
    fully_used = (stats.sm_activity is not None and stats.sm_activity >= SM_ACTIVITY_FULL) or (
        power_share is not None and power_share >= POWER_SHARE_FULL)
    verdict = ("The chip runs at its power budget: it is fully used. This is not a fault."
               if fully_used else
               "The chip reaches its power budget; nothing is wrong with the GPU.")
    return Finding(
        severity="info",
        title="Clocks limited by the power cap (the GPU is working at its power budget)",
        message=(f"In {stats.share:.0%} of the busy samples the driver held the clocks to stay under the power "
                 f"limit (SwPowerCap): {_clock_text(stats)}{power}{activity}. {verdict}"),
        evidence=_evidence(stats, window),
        remedy=Remedy(
            text="Nothing to fix. Only a higher power limit (admin, up to the board's maximum) or less energy "
            "per result (bf16 instead of fp32, fused kernels) changes this.",
            code="nvidia-smi -q -d POWER   # current, default and maximum power limits",
        ),
    )


def _low_power(busy: list[GpuSample], gpus: dict[int, GpuInfo], window: str) -> Finding | None:
    claimed = [s for s in busy if s.util_percent is not None and s.util_percent >= LOW_POWER_UTIL]
    shares = []
    for s in claimed:
        limit = gpus[s.gpu_index].power_limit_w if s.gpu_index in gpus else None
        if s.power_w is not None and limit:
            shares.append(s.power_w / limit)
    if not claimed or not shares or len(shares) < max(1, len(busy) // 2):
        return None
    share = sum(shares) / len(shares)
    if share >= LOW_POWER_SHARE:
        return None
    util = metrics.gpu_metric_mean(claimed, "util_percent") or 0.0
    return Finding(
        severity="info",
        title="GPU reports busy, yet draws little power",
        message=(f"In {len(claimed)} samples with utilization {util:.0f}%, the GPU drew only {share:.0%} of its "
                 "power limit on average. Utilization is a duty cycle (some kernel was running), not how much of "
                 "the chip worked; a fully used GPU draws 80-90% of its limit or more. SM activity (GPM) was not "
                 "measured here, so power is the best hint: the kernels are probably too small to fill the GPU "
                 "(see GD301)."),
        evidence={
            "util_percent": Evidence(round(util, 1), "%", window, "NVML utilization in those samples, mean"),
            "power_share": Evidence(round(share * 100, 1), "%", window, "power draw / enforced limit, mean"),
        },
        remedy=Remedy(text="Give each kernel more work: larger batches (GD202) and fused kernels "
                      "(torch.compile, CUDA graphs; GD301)."),
    )
