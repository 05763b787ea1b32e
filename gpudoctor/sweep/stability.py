"""When is a measurement done? The stability rule, as pure functions.

After warm-up, timed iterations continue until all of these hold:
  1. at least `min_iters` iterations (20) and `min_time_s` of measured time
     (1 s on GPU, 0.5 s on CPU);
  2. precise: the 95% confidence interval of the median iteration time, taken from
     order statistics (no assumption about the distribution), has a half-width below
     `rel_ci_target` (5%) of the median;
  3. steady: the medians of the first and the second half of the timed iterations
     differ by less than `drift_target` (5%): clocks, caches and autotuners have settled;
  4. a thin tail: p90 at most `tail_target` (2x) the median. A median can be precise and
     steady while one iteration in five takes 150x longer (a batch-1 loop beside a
     garbage collector or a busy host); such a size stops there, marked not stable
     (more of the same iterations would not thin the tail).
The loop also ends, marked not stable, at `max_time_s` (10 s) of wall time or
`max_iters`, once it has at least `MIN_TIMED_ITERS` iterations.

Tight steps end sooner: from MIN_TIGHT_ITERS (8) iterations on, once they cover
`min_time_s` and sit within half the precision and drift targets (the median's CI
within +/-2.5%: up to 10 iterations that CI spans all of them, so every step lies in a
5% band; the halves' medians within 2.5%). At large batch sizes a step takes long and
its time barely varies; 20 of them would only repeat it. Steps that are not that tight
keep the full window.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

Z_95 = 1.96
MIN_TIMED_ITERS = 3  # below this a percentile is not a measurement
MIN_ITERS_FOR_CI = 6
MIN_ITERS_FOR_DRIFT = 10
MIN_TIGHT_ITERS = 8  # the fewest iterations that may end a tight window (halves of 4 for its drift)
# A GPU needs longer than a CPU for clocks and power to settle under load.
DEFAULT_MIN_TIME_S = {"cuda": 1.0, "cpu": 0.5}


@dataclass(frozen=True)
class StabilityRule:
    min_iters: int = 20
    min_time_s: float = 1.0
    max_time_s: float = 10.0
    max_iters: int = 100_000
    rel_ci_target: float = 0.05
    drift_target: float = 0.05
    tail_target: float = 2.0  # p90 / median


@dataclass(frozen=True)
class Verdict:
    done: bool
    stable: bool
    rel_ci_half_width: float | None
    drift: float | None
    reason: str
    tail_ratio: float | None = None  # p90 / median


def median_ci(values: Sequence[float]) -> tuple[float, float] | None:
    """Distribution-free 95% confidence interval of the median (order statistics)."""
    n = len(values)
    if n < MIN_ITERS_FOR_CI:
        return None
    data = sorted(values)
    spread = Z_95 * math.sqrt(n) / 2
    lower_rank = max(1, math.floor(n / 2 - spread))  # 1-based ranks
    upper_rank = min(n, math.ceil(1 + n / 2 + spread))
    return data[lower_rank - 1], data[upper_rank - 1]


def rel_ci_half_width(values: Sequence[float]) -> float | None:
    ci = median_ci(values)
    if ci is None:
        return None
    median = statistics.median(values)
    if median <= 0:
        return None
    return (ci[1] - ci[0]) / (2 * median)


def drift(values: Sequence[float], min_n: int = MIN_ITERS_FOR_DRIFT) -> float | None:
    """|median of the second half / median of the first half - 1|, from `min_n` iterations."""
    n = len(values)
    if n < min_n:
        return None
    first = statistics.median(values[: n // 2])
    second = statistics.median(values[n // 2 :])
    if first <= 0:
        return None
    return abs(second / first - 1)


def tail_ratio(values: Sequence[float]) -> float | None:
    """p90 / median (nearest rank), from 10 iterations on."""
    n = len(values)
    if n < MIN_ITERS_FOR_DRIFT:
        return None
    data = sorted(values)
    median = statistics.median(data)
    p90 = data[min(n - 1, math.ceil(0.9 * n) - 1)]
    return p90 / median if median > 0 else None


def judge(durations: Sequence[float], wall_s: float, rule: StabilityRule) -> Verdict:
    """Decide whether the timed loop may stop, and whether what it has is stable."""
    n = len(durations)
    measured = sum(durations)
    ci = rel_ci_half_width(durations)
    dr = drift(durations)
    numbers = f"{n} iterations, {measured:.2f} s measured"
    if ci is not None:
        numbers += f", median +/-{ci:.1%} (95% CI)"
    if dr is not None:
        numbers += f", drift {dr:.1%}"
    enough = n >= rule.min_iters and measured >= rule.min_time_s
    if not enough and n >= MIN_TIGHT_ITERS and measured >= rule.min_time_s:
        # tight steps: fewer iterations, twice as tight (drift from halves of 4 below 10)
        tight_drift = dr if dr is not None else drift(durations, MIN_TIGHT_ITERS)
        if (ci is not None and ci < rule.rel_ci_target / 2 and tight_drift is not None
                and tight_drift < rule.drift_target / 2):
            enough = True
            if dr is None:
                dr = tight_drift
                numbers += f", drift {dr:.1%}"
            numbers += " (tight: stopped early)"
    precise = ci is not None and ci < rule.rel_ci_target
    steady = dr is not None and dr < rule.drift_target
    tail = tail_ratio(durations)
    if enough and precise and steady:
        if tail is not None and tail > rule.tail_target:
            return Verdict(True, False, ci, dr, f"not stable: a heavy tail, p90 is {tail:.3g}x the median (above "
                                                f"{rule.tail_target:g}x): {numbers}", tail)
        return Verdict(True, True, ci, dr, f"stable: {numbers}", tail)
    capped = wall_s >= rule.max_time_s or n >= rule.max_iters
    if capped and n >= MIN_TIMED_ITERS:
        missing = []
        if not enough:
            missing.append(f"needs >= {rule.min_iters} iterations and >= {rule.min_time_s:g} s")
        if not precise:
            missing.append(f"median CI not below {rule.rel_ci_target:.0%}")
        if not steady:
            missing.append(f"drift not below {rule.drift_target:.0%}")
        cap = f"{rule.max_time_s:g} s" if wall_s >= rule.max_time_s else f"{rule.max_iters} iterations"
        return Verdict(True, False, ci, dr, f"not stable at the {cap} cap ({'; '.join(missing)}): {numbers}", tail)
    return Verdict(False, False, ci, dr, numbers, tail)
