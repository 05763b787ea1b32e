"""PF2xx: GPU health (ECC, memory remapping, clock events at idle, power limit, clocks),
judged per GPU from the NVML facts."""

from __future__ import annotations

from gpudoctor.collectors.nvml_device import CLOCK_EVENT_REASONS
from gpudoctor.preflight.context import Context
from gpudoctor.preflight.gpu import Verdict, per_gpu
from gpudoctor.preflight.gpu_facts import GpuFacts
from gpudoctor.preflight.model import FAIL, NOT_CHECKED, PASS, WARN, ItemResult, Unread

HEALTH_EVENTS = {0x8: "HwSlowdown", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown"}
SW_POWER_CAP = 0x4


def probe(ctx: Context) -> list[ItemResult]:
    return [judge(ctx) for _, judge in ITEMS]


def ecc(ctx: Context) -> ItemResult:
    def judge(g: GpuFacts) -> Verdict:
        mode, volatile, aggregate = (
            g.get("ecc_mode"),
            g.get("ecc_volatile_uncorrected"),
            g.get("ecc_aggregate_uncorrected"),
        )
        if isinstance(mode, Unread):
            why = f"ECC not supported on {g.name}" if "not supported" in mode.reason else mode.reason
            return NOT_CHECKED, why, {}
        current, pending = int(mode[0]), int(mode[1])
        values = {
            "ecc_enabled": bool(current),
            "ecc_pending": bool(pending),
            "volatile_uncorrected": volatile if isinstance(volatile, int) else None,
            "aggregate_uncorrected": aggregate if isinstance(aggregate, int) else None,
        }
        if not current:
            return WARN, "ECC disabled" + (" (enabled after the next reset)" if pending else ""), values
        if isinstance(volatile, int) and volatile > 0:
            return FAIL, f"{volatile} uncorrectable ECC errors since the driver loaded", values
        if isinstance(volatile, Unread):
            return NOT_CHECKED, volatile.reason, values
        history = f"; {aggregate} uncorrectable over the GPU's life" if isinstance(aggregate, int) and aggregate else ""
        return (WARN if history else PASS), "ECC on, no uncorrectable error since the driver loaded" + history, values

    return per_gpu(ctx, "PF201", "ECC on; 0 uncorrectable errors", judge)


def remap(ctx: Context) -> ItemResult:
    def judge(g: GpuFacts) -> Verdict:
        rows = g.get("remapped_rows")
        if not isinstance(rows, Unread):
            corrected, uncorrected, pending, failure = (int(v) for v in rows)
            values = {
                "remapped_corrected": corrected,
                "remapped_uncorrected": uncorrected,
                "pending": bool(pending),
                "failure": bool(failure),
            }
            counts = f"{corrected + uncorrected} rows remapped ({uncorrected} for uncorrectable errors)"
            if failure:
                return FAIL, f"row remapping failed; {counts}", values
            if pending:
                return FAIL, f"a row remap is pending (needs a GPU reset); {counts}", values
            return PASS, f"nothing pending; {counts}", values
        pages = g.get("retired_pending")
        if isinstance(pages, Unread):
            return NOT_CHECKED, f"{rows.reason}; {pages.reason}", {}
        if int(pages):
            return FAIL, "a page retirement is pending (needs a GPU reset)", {"retired_pending": True}
        return PASS, "no page retirement pending", {"retired_pending": False}

    return per_gpu(ctx, "PF202", "no pending remap or retirement, no remap failure", judge)


def _reason_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]


def clock_events(ctx: Context) -> ItemResult:
    def judge(g: GpuFacts) -> Verdict:
        mask, temp, util = g.get("clock_reasons"), g.get("temperature"), g.get("util")
        if isinstance(mask, Unread):
            return NOT_CHECKED, mask.reason, {}
        mask = int(mask)
        temp_text = f"{temp} C" if isinstance(temp, int) else "temperature not read"
        values = {"reasons": _reason_names(mask), "temperature_c": temp if isinstance(temp, int) else None}
        busy = isinstance(util, int) and util > 0
        health = [name for bit, name in HEALTH_EVENTS.items() if mask & bit]
        active = ", ".join(_reason_names(mask)) or "none"
        if health:
            return FAIL, f"{', '.join(health)} active ({temp_text}{', GPU busy' if busy else ''})", values
        if mask & SW_POWER_CAP and not busy:
            return WARN, f"SwPowerCap active with no load ({temp_text})", values
        return PASS, f"clock-event reasons: {active} ({temp_text})", values

    return per_gpu(ctx, "PF203", "no HW slowdown, thermal or power-brake event", judge)


def power_limit(ctx: Context) -> ItemResult:
    share = ctx.policy.min_power_limit_share

    def judge(g: GpuFacts) -> Verdict:
        limit, default = g.get("power_limit_mw"), g.get("power_default_mw")
        if isinstance(limit, Unread) or isinstance(default, Unread):
            return NOT_CHECKED, limit.reason if isinstance(limit, Unread) else default.reason, {}
        values = {"enforced_w": limit / 1000, "default_w": default / 1000}
        text = f"{limit / 1000:.0f} W of the default {default / 1000:.0f} W"
        if limit >= default:
            return PASS, text, values
        if share is not None:
            return (PASS if limit >= share * default else FAIL), text, values
        return WARN, text + " (capped)", values

    expected = "the board's default limit" if share is None else f"at least {share:.0%} of the default limit (policy)"
    return per_gpu(ctx, "PF204", expected, judge)


def app_clocks(ctx: Context) -> ItemResult:
    def judge(g: GpuFacts) -> Verdict:
        parts, values, status = [], {}, PASS
        for key, label in (("sm", "SM"), ("mem", "memory")):
            current, default = g.get(f"app_clock_{key}"), g.get(f"default_app_clock_{key}")
            if isinstance(current, Unread) or isinstance(default, Unread):
                reason = current.reason if isinstance(current, Unread) else default.reason
                return NOT_CHECKED, reason, {}
            values[f"{key}_mhz"], values[f"{key}_default_mhz"] = current, default
            parts.append(f"{label} {current} MHz (default {default})")
            if current < default:
                status = WARN
        max_sm = g.get("max_clock_sm")
        if isinstance(max_sm, int):
            parts.append(f"SM max {max_sm} MHz")
        return status, ", ".join(parts), values

    return per_gpu(ctx, "PF205", "application clocks at or above the defaults", judge)


# (item ID, judge): the order of the checklist
ITEMS = (
    ("PF201", ecc),
    ("PF202", remap),
    ("PF203", clock_events),
    ("PF204", power_limit),
    ("PF205", app_clocks),
)
