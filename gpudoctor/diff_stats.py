"""How much a before/after comparison can tell: the steady steps each side measured, their
spread, and whether a difference in step time stands out of it.

A run with 3 steady steps, or one whose step times scatter widely, cannot show that a
change helped: the median of a few noisy steps moves by chance. So each side's step times
get their median, interquartile range and a 95% confidence interval of the median (from
order statistics: no assumption on the distribution, which for step times is skewed by
stalls). A difference counts as real only when both sides have at least
MIN_STEADY_STEPS steps and the two intervals do not overlap (per-sample times when the
batch sizes differ).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpudoctor.report_model import Report, as_report

MIN_STEADY_STEPS = 10
CONFIDENCE = 0.95
_EXACT_UP_TO = 1000  # binomial sums beyond this use the normal approximation


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _median_rank_bounds(n: int) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics that bound the median with at least
    CONFIDENCE: the largest k with P(Binomial(n, 1/2) < k) <= (1 - CONFIDENCE) / 2."""
    tail = (1 - CONFIDENCE) / 2
    if n > _EXACT_UP_TO:
        k = math.floor(n / 2 - 1.959964 * math.sqrt(n) / 2)
    else:
        k, cumulative, total = 0, 0, 2**n
        while k < n and (cumulative + math.comb(n, k)) / total <= tail:
            cumulative += math.comb(n, k)
            k += 1
    k = max(k, 1)
    return k - 1, n - k


def step_time_stats(durations: Sequence[float]) -> dict[str, Any]:
    """n, median, p25/p75 and the IQR, and the 95% interval of the median (None when n < 6,
    where no pair of order statistics reaches 95%)."""
    values = sorted(d for d in durations if isinstance(d, (int, float)) and math.isfinite(d) and d >= 0)
    n = len(values)
    stats: dict[str, Any] = {"steady_steps": n, "median_s": None, "p25_s": None, "p75_s": None, "iqr_s": None,
                             "median_ci95_s": None}
    if not n:
        return stats
    p25, p75 = _quantile(values, 0.25), _quantile(values, 0.75)
    stats.update(median_s=_quantile(values, 0.5), p25_s=p25, p75_s=p75, iqr_s=p75 - p25)
    if n >= 6:
        lo, hi = _median_rank_bounds(n)
        stats["median_ci95_s"] = [values[lo], values[hi]]
    return stats


def steady_durations(report: Report | Mapping[str, Any]) -> list[float]:
    """The steady steps' durations as the report's timeline holds them (the last
    summary.steady_steps of them: warm-up steps come first). A long run's timeline is a
    uniform subsample: fewer values, so a wider, more cautious interval."""
    report = as_report(report)
    steady = report.summary.steady_steps
    timeline = (report.evidence.get("timeline") or {}).get("steps") or {}
    durations = timeline.get("duration_s") if isinstance(timeline, Mapping) else None
    if not isinstance(durations, list) or steady <= 0:
        return []
    return [float(d) for d in durations[-steady:] if isinstance(d, (int, float)) and not isinstance(d, bool)]


def significance(before: Mapping[str, Any], after: Mapping[str, Any], unit_before: float = 1.0,
                 unit_after: float = 1.0) -> dict[str, Any]:
    """Whether the step-time difference is real. `unit_*` divide the step times (the batch
    size, to compare time per sample when batches differ)."""
    nb, na = before.get("steady_steps", 0), after.get("steady_steps", 0)
    result: dict[str, Any] = {"significant": False, "reason": None, "min_steady_steps": MIN_STEADY_STEPS}
    if nb < MIN_STEADY_STEPS or na < MIN_STEADY_STEPS:
        result["reason"] = (f"too few steady steps to tell: {nb} before, {na} after "
                            f"(at least {MIN_STEADY_STEPS} each)")
        return result
    ci_b, ci_a = before.get("median_ci95_s"), after.get("median_ci95_s")
    if not ci_b or not ci_a:
        result["reason"] = "the step times' spread is unknown"
        return result
    lo_b, hi_b = ci_b[0] / unit_before, ci_b[1] / unit_before
    lo_a, hi_a = ci_a[0] / unit_after, ci_a[1] / unit_after
    if hi_a < lo_b or hi_b < lo_a:
        result["significant"] = True
        return result
    result["reason"] = ("within the noise: the 95% intervals of the median step time overlap "
                        f"({_ms(ci_b)} before, {_ms(ci_a)} after)")
    return result


def _ms(interval: Sequence[float]) -> str:
    return f"{interval[0] * 1e3:.3g}-{interval[1] * 1e3:.3g} ms"
