"""How much a before/after comparison can tell: the steady steps each side measured, their
spread, and whether a difference in throughput stands out of it.

A run with 3 steady steps, or one whose step times scatter widely, cannot show that a
change helped. The primary figure is throughput, steps per second over the steady window
(the figure `--try` measures a remedy by), with its own spread: the steady steps are cut
into consecutive windows of at least WINDOW_STEPS steps, each window's rate taken, and a
95% interval of their mean drawn (Student's t). Windows of several steps are what a
loader that delivers in bursts needs: one fast step and four slow ones average out inside
a window, where the median step (blind to the slow ones: median 53 ms, mean 175 ms) would
not see the fix of the slow ones at all. The median step time stays as a secondary
figure, with its interval from order statistics (no assumption on the distribution).

A difference counts as real only when both sides have at least MIN_STEADY_STEPS steps and
the two throughput intervals do not overlap (per-sample rates when the batch sizes differ);
without MIN_WINDOWS windows a side, the median intervals decide.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpudoctor.verdict.report_model import Report, as_report

MIN_STEADY_STEPS = 10
CONFIDENCE = 0.95
_EXACT_UP_TO = 1000  # binomial sums beyond this use the normal approximation
WINDOW_STEPS = 5  # steps per throughput window at least: a burst of fast batches averages out inside one
MAX_WINDOWS = 20  # longer runs get longer windows, not more of them
MIN_WINDOWS = 3  # fewer give no spread to speak of
# Student's t, two-sided 95%, by degrees of freedom (windows - 1)
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093}


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
    """n, the throughput (steps/s) with its windows' 95% interval, the median, p25/p75 and the
    IQR, and the 95% interval of the median (None when n < 6, where no pair of order
    statistics reaches 95%). `durations` in the order the steps ran."""
    ordered = [float(d) for d in durations if isinstance(d, (int, float)) and math.isfinite(d) and d >= 0]
    values = sorted(ordered)
    n = len(values)
    stats: dict[str, Any] = {"steady_steps": n, "median_s": None, "p25_s": None, "p75_s": None, "iqr_s": None,
                             "median_ci95_s": None, **throughput_stats(ordered)}
    if not n:
        return stats
    p25, p75 = _quantile(values, 0.25), _quantile(values, 0.75)
    stats.update(median_s=_quantile(values, 0.5), p25_s=p25, p75_s=p75, iqr_s=p75 - p25)
    if n >= 6:
        lo, hi = _median_rank_bounds(n)
        stats["median_ci95_s"] = [values[lo], values[hi]]
    return stats


def throughput_stats(ordered: Sequence[float]) -> dict[str, Any]:
    """Steps/s over the steps (n / their total time), and the 95% interval of the mean rate
    of their consecutive windows (None with fewer than MIN_WINDOWS windows)."""
    total = sum(ordered)
    out: dict[str, Any] = {"steps_per_s": len(ordered) / total if total > 0 else None, "windows": 0,
                           "window_steps": None, "steps_per_s_ci95": None}
    size = max(WINDOW_STEPS, math.ceil(len(ordered) / MAX_WINDOWS))
    count = len(ordered) // size
    if count < MIN_WINDOWS:
        return out
    rates = []
    for w in range(count):  # the last, partial window's steps are left out of the spread only
        spent = sum(ordered[w * size:(w + 1) * size])
        if spent <= 0:
            return out
        rates.append(size / spent)
    mean = sum(rates) / count
    sd = math.sqrt(sum((r - mean) ** 2 for r in rates) / (count - 1))
    half = _T95.get(count - 1, 1.96) * sd / math.sqrt(count)
    out.update(windows=count, window_steps=size, steps_per_s_ci95=[max(0.0, mean - half), mean + half])
    return out


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
    """Whether the throughput difference is real (`basis` "throughput"), or, without windows
    enough, the median step time's (`basis` "median"); `median_significant` says it for the
    median alone. `unit_*`: the batch sizes, to compare samples when batches differ."""
    nb, na = before.get("steady_steps", 0), after.get("steady_steps", 0)
    result: dict[str, Any] = {"significant": False, "reason": None, "min_steady_steps": MIN_STEADY_STEPS,
                              "basis": None, "median_significant": False}
    if nb < MIN_STEADY_STEPS or na < MIN_STEADY_STEPS:
        result["reason"] = (f"too few steady steps to tell: {nb} before, {na} after "
                            f"(at least {MIN_STEADY_STEPS} each)")
        return result
    median = _median_significance(before, after, unit_before, unit_after)
    result["median_significant"] = median["significant"]
    rate_b, rate_a = before.get("steps_per_s_ci95"), after.get("steps_per_s_ci95")
    if not rate_b or not rate_a:
        return {**result, **median, "basis": "median"}
    lo_b, hi_b = rate_b[0] * unit_before, rate_b[1] * unit_before
    lo_a, hi_a = rate_a[0] * unit_after, rate_a[1] * unit_after
    result["basis"] = "throughput"
    if hi_a < lo_b or hi_b < lo_a:
        result["significant"] = True
        return result
    unit = "steps/s" if unit_before == unit_after == 1.0 else "samples/s"
    result["reason"] = (f"within the noise: the 95% intervals of the throughput over windows of steps overlap "
                        f"({_rate(lo_b)}-{_rate(hi_b)} {unit} before, {_rate(lo_a)}-{_rate(hi_a)} {unit} after)")
    return result


def _median_significance(before: Mapping[str, Any], after: Mapping[str, Any], unit_before: float,
                         unit_after: float) -> dict[str, Any]:
    """Whether the median step times' 95% intervals are apart (per sample: divided by the units)."""
    result: dict[str, Any] = {"significant": False, "reason": None}
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


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _ms(interval: Sequence[float]) -> str:
    return f"{interval[0] * 1e3:.3g}-{interval[1] * 1e3:.3g} ms"
