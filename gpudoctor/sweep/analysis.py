"""From measured sizes to answers: the knee, the memory edge, the latency limit, power.

Pure functions of TrialResults (no hardware, no torch), tested on synthetic curves.

Knee: the smallest measured size after which the metric (throughput, or SM activity)
grows by less than 5% per doubling: every larger size s' satisfies
value(s') <= value(s) * 1.05 ** max(1, log2(s'/s)). A size is only judged when some
size at least twice as large was measured; sizes closer than one doubling count as
one doubling, so bisection points a few percent apart cannot turn noise into a knee.
No size qualifying means the curve still climbs at the largest size measured.

Memory edge: the largest size that ran below the smallest size that ran out of memory.
"Fits with headroom": the largest measured size whose peak memory (reserved on GPU,
resident set on CPU) stays below (1 - headroom) of the device's capacity. A linear fit
of peak memory against batch size gives the per-sample cost and an estimate beyond
the measured sizes, labelled as an estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpudoctor.sweep import records
from gpudoctor.sweep.records import TrialResult

KNEE_GAIN_PER_DOUBLING = 0.05
POWER_NEAR_FULL = 0.8  # 80-90% of the limit under load: the chip is near fully used
POWER_AT_LIMIT = 0.9
MIN_FIT_R_SQUARED = 0.95
MAX_EXTRAPOLATION = 8  # an estimate beyond 8x the largest measured size is not given


@dataclass(frozen=True)
class Knee:
    metric: str  # samples_per_s | sm_activity_percent
    batch_size: int | None
    value: float | None
    peak_value: float | None
    peak_batch_size: int | None
    fraction_of_peak: float | None
    growth_per_doubling_after: float | None  # from the knee (or last size) over the next doubling
    reason: str


@dataclass(frozen=True)
class MemoryEdge:
    largest_fit: int | None  # largest size that ran
    smallest_oom: int | None  # smallest size that ran out of memory; None: no OOM seen
    capacity_bytes: int | None
    headroom: float
    largest_fit_with_headroom: int | None
    per_sample_bytes: float | None  # slope of peak memory vs batch size
    fixed_bytes: float | None  # intercept: weights, optimizer state, workspaces
    estimated_max_batch_with_headroom: int | None  # from the fit; an estimate
    reason: str

    @property
    def found(self) -> bool:
        return self.smallest_oom is not None and self.largest_fit is not None


@dataclass(frozen=True)
class LatencyLimit:
    budget_s: float
    largest_within: int | None  # largest measured size with p50 <= budget
    smallest_over: int | None
    p50_at_largest_within_s: float | None
    reason: str


@dataclass(frozen=True)
class PowerPoint:
    batch_size: int
    power_w_mean: float | None
    power_limit_w: float | None
    fraction: float | None
    verdict: str  # at_limit | near_full | headroom | unknown


@dataclass(frozen=True)
class Analysis:
    knee: Knee
    knee_sm_activity: Knee | None  # None when SM activity was not measured
    memory: MemoryEdge
    latency: LatencyLimit | None
    power: list[PowerPoint] = field(default_factory=list)


def ok_points(trials: Sequence[TrialResult], probes: bool = False) -> list[TrialResult]:
    """The sizes that ran, one trial each, ascending; fit probes (memory only) with `probes`."""
    best: dict[int, TrialResult] = {}
    for trial in trials:
        if trial.ok and (probes or not trial.fit_probe):
            best[trial.batch_size] = trial
    return [best[size] for size in sorted(best)]


def throughput_knee(trials: Sequence[TrialResult]) -> Knee:
    return find_knee([(t.batch_size, t.timing.samples_per_s) for t in ok_points(trials) if t.timing],
                     "samples_per_s")


def find_knee(points: Sequence[tuple[int, float]], metric: str, gain: float = KNEE_GAIN_PER_DOUBLING) -> Knee:
    points = sorted(points)
    if not points:
        return Knee(metric, None, None, None, None, None, None, "no size was measured")
    peak_size, peak = max(points, key=lambda p: p[1])
    if len(points) < 2:
        return Knee(metric, None, None, peak, peak_size, None, None, "needs at least two measured sizes")
    for i, (size, value) in enumerate(points):
        later = points[i + 1 :]
        if not any(other >= 2 * size for other, _ in later) or value <= 0:
            continue
        if all(v <= value * (1 + gain) ** max(1.0, math.log2(s / size)) for s, v in later):
            growth = _growth_after(points, i)
            return Knee(
                metric, size, value, peak, peak_size, value / peak if peak > 0 else None, growth,
                f"batch {size} reaches {value / peak:.0%} of the peak ({_fmt(peak, metric)} at batch {peak_size}); "
                f"every larger size adds less than {gain:.0%} per doubling",
            )
    growth = _growth_after(points, _last_judgeable(points))
    tail = f" (+{growth:.0%} per doubling at the top)" if growth is not None else ""
    return Knee(
        metric, None, None, peak, peak_size, None, growth,
        f"not reached: still growing by more than {gain:.0%} per doubling up to batch {points[-1][0]}{tail}",
    )


def _growth_after(points: Sequence[tuple[int, float]], index: int) -> float | None:
    """Growth per doubling from points[index] to the first size at least twice as large."""
    if index < 0:
        return None
    size, value = points[index]
    for other, other_value in points[index + 1 :]:
        if other >= 2 * size and value > 0 and other_value > 0:
            growth: float = (other_value / value) ** (1 / math.log2(other / size)) - 1
            return growth
    return None


def _last_judgeable(points: Sequence[tuple[int, float]]) -> int:
    top = points[-1][0]
    candidates = [i for i, (size, _) in enumerate(points) if 2 * size <= top]
    return candidates[-1] if candidates else -1


def _fmt(value: float, metric: str) -> str:
    if metric.endswith("_percent"):
        return f"{value:.0f}%"
    return f"{value:,.0f} samples/s" if value >= 100 else f"{value:.3g} samples/s"


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float] | None:
    """Least-squares (slope, intercept, r_squared), or None with fewer than two distinct x."""
    if len(set(xs)) < 2:
        return None
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    syy = sum((y - my) ** 2 for y in ys)
    slope = sxy / sxx
    r_squared = sxy * sxy / (sxx * syy) if syy > 0 else 0.0
    return slope, my - slope * mx, r_squared


def memory_edge(trials: Sequence[TrialResult], headroom: float) -> MemoryEdge:
    fits = ok_points(trials, probes=True)
    ooms = sorted(t.batch_size for t in trials if t.status == records.OOM)
    smallest_oom = ooms[0] if ooms else None
    below = [t.batch_size for t in fits if smallest_oom is None or t.batch_size < smallest_oom]
    largest_fit = max(below) if below else None
    capacity = _capacity(fits, trials)
    limit = capacity * (1 - headroom) if capacity else None
    measured = [(t.batch_size, t.memory.peak_bytes) for t in fits if t.memory.peak_bytes is not None]
    with_headroom = [s for s, peak in measured if limit is not None and peak <= limit]
    if smallest_oom is not None:
        with_headroom = [s for s in with_headroom if s < smallest_oom]
    per_sample, fixed, estimate = _per_sample_cost(measured, limit, smallest_oom)
    return MemoryEdge(
        largest_fit, smallest_oom, capacity, headroom, max(with_headroom) if with_headroom else None,
        per_sample, fixed, estimate, _edge_reason(largest_fit, smallest_oom),
    )


def _capacity(fits: Sequence[TrialResult], trials: Sequence[TrialResult]) -> int | None:
    """The device's memory as the sizes that fit read it, else as any size did."""
    capacity = next((t.memory.capacity_bytes for t in fits if t.memory.capacity_bytes), None)
    if capacity is None:
        capacity = next((t.memory.capacity_bytes for t in trials if t.memory.capacity_bytes), None)
    return capacity


def _per_sample_cost(measured: list[tuple[int, int]], limit: float | None,
                     smallest_oom: int | None) -> tuple[float | None, float | None, int | None]:
    """(bytes per sample, fixed bytes, the largest batch estimated to fit within `limit`) from a
    linear fit of the peaks, each None where the peaks do not grow clearly linearly."""
    fit = linear_fit([float(s) for s, _ in measured], [float(p) for _, p in measured]) if len(measured) >= 2 else None
    # Only a clearly linear growth is a per-sample cost: on CPU the resident set of a tiny
    # model is mostly the interpreter, and its noise must not become a "max batch".
    if fit is None or fit[0] <= 0 or fit[2] < MIN_FIT_R_SQUARED:
        return None, None, None
    per_sample, fixed = fit[0], fit[1]
    largest_measured = max(s for s, _ in measured)
    estimate = None
    if limit is not None and limit > fixed:
        estimate = int((limit - fixed) // per_sample)
        if smallest_oom is not None:
            estimate = min(estimate, smallest_oom - 1)
        if estimate > MAX_EXTRAPOLATION * largest_measured:
            estimate = None  # too far beyond what was measured to be worth a number
    return per_sample, fixed, estimate


def _edge_reason(largest_fit: int | None, smallest_oom: int | None) -> str:
    if smallest_oom is None:
        return f"no out-of-memory up to batch {largest_fit}" if largest_fit else "no size ran"
    if largest_fit is None:
        return f"out of memory already at batch {smallest_oom}: nothing measured fits"
    return f"fits at batch {largest_fit}, out of memory at {smallest_oom}"


def latency_limit(trials: Sequence[TrialResult], budget_s: float) -> LatencyLimit:
    points = [(t.batch_size, t.timing.latency_p50_s) for t in ok_points(trials) if t.timing]
    within = [(s, p50) for s, p50 in points if p50 <= budget_s]
    over = [s for s, p50 in points if p50 > budget_s]
    largest = max(within) if within else None
    smallest_over = min((s for s in over if largest is None or s > largest[0]), default=None)
    if largest is None:
        reason = f"no measured size meets the {budget_s * 1e3:g} ms p50 budget"
    else:
        reason = f"batch {largest[0]} has p50 {largest[1] * 1e3:.3g} ms, within the {budget_s * 1e3:g} ms budget"
        if smallest_over is not None:
            reason += f"; batch {smallest_over} exceeds it"
    return LatencyLimit(
        budget_s, largest[0] if largest else None, smallest_over, largest[1] if largest else None, reason
    )


def power_points(trials: Sequence[TrialResult]) -> list[PowerPoint]:
    out = []
    for t in ok_points(trials):
        if t.gpu is None:
            continue
        fraction = t.gpu.power_fraction
        if fraction is None:
            verdict = "unknown"
        elif fraction >= POWER_AT_LIMIT:
            verdict = "at_limit"
        elif fraction >= POWER_NEAR_FULL:
            verdict = "near_full"
        else:
            verdict = "headroom"
        out.append(PowerPoint(t.batch_size, t.gpu.power_w_mean, t.gpu.power_limit_w, fraction, verdict))
    return out


def analyze(trials: Sequence[TrialResult], headroom: float, latency_budget_s: float | None) -> Analysis:
    fits = ok_points(trials)
    sm = [(t.batch_size, t.gpu.sm_activity_percent) for t in fits if t.gpu and t.gpu.sm_activity_percent is not None]
    return Analysis(
        knee=throughput_knee(trials),
        knee_sm_activity=find_knee(sm, "sm_activity_percent") if sm else None,
        memory=memory_edge(trials, headroom),
        latency=latency_limit(trials, latency_budget_s) if latency_budget_s is not None else None,
        power=power_points(trials),
    )
