"""Synthetic trial results and a fake trial runner: curves with known answers."""

from __future__ import annotations

from collections.abc import Callable

from gpudoctor.sweep import records
from gpudoctor.sweep.records import GpuActivity, Memory, Timing, TrialResult

GB = 10**9


def timing(batch_size: int, rate: float, p50_s: float | None = None, stable: bool = True) -> Timing:
    step = batch_size / rate
    p50 = p50_s if p50_s is not None else step
    return Timing(
        timer="perf_counter", iterations=50, measured_s=50 * step, wall_s=50 * step, warmup_iterations=3,
        warmup_s=0.2, step_time_mean_s=step, step_time_median_s=p50, latency_p50_s=p50,
        latency_p90_s=p50 * 1.1, latency_p99_s=p50 * 1.3, samples_per_s=rate, stable=stable,
        rel_ci_half_width=0.01, drift=0.01, stop_reason="stable (synthetic)",
    )


def point(
    batch_size: int,
    rate: float,
    *,
    p50_s: float | None = None,
    peak: int | None = None,
    capacity: int | None = None,
    sm: float | None = None,
    power: float | None = None,
    limit: float | None = None,
) -> TrialResult:
    gpu = None
    if sm is not None or power is not None:
        gpu = GpuActivity(sm_activity_percent=sm, util_percent_mean=sm, power_w_mean=power, power_limit_w=limit)
    return TrialResult(
        batch_size=batch_size,
        status=records.OK,
        timing=timing(batch_size, rate, p50_s),
        memory=Memory(capacity_bytes=capacity, peak_reserved_bytes=peak, peak_allocated_bytes=peak),
        gpu=gpu,
        device={"type": "cuda" if gpu else "cpu", "name": "synthetic"},
    )


def failed(batch_size: int, status: str, message: str = "") -> TrialResult:
    return TrialResult(batch_size=batch_size, status=status, message=message or status)


def saturating(batch_size: int, at: int = 64, peak: float = 1000.0) -> float:
    """Throughput that doubles with the batch up to `at`, then stays flat."""
    return peak * min(batch_size, at) / at


class FakeRunner:
    """batch_size -> TrialResult from a synthetic model of the GPU.

    rate(b) gives throughput; memory is fixed + per_sample * b and anything above
    `fits_up_to` runs out of memory; `failures` maps a size to a (status, message).
    """

    def __init__(
        self,
        rate: Callable[[int], float] = saturating,
        fits_up_to: int | None = None,
        latency_s: Callable[[int], float] | None = None,
        failures: dict[int, tuple[str, str]] | None = None,
        capacity: int = 100 * GB,
    ) -> None:
        self.rate = rate
        self.fits_up_to = fits_up_to
        self.latency_s = latency_s
        self.failures = failures or {}
        self.capacity = capacity
        self.calls: list[int] = []

    def __call__(self, batch_size: int) -> TrialResult:
        self.calls.append(batch_size)
        if batch_size in self.failures:
            status, message = self.failures[batch_size]
            return failed(batch_size, status, message)
        if self.fits_up_to is not None and batch_size > self.fits_up_to:
            return failed(batch_size, records.OOM, "CUDA out of memory (synthetic)")
        peak = int(self.capacity * 0.05 + self.capacity * 0.9 * batch_size / (self.fits_up_to or 10**6))
        result = point(
            batch_size, self.rate(batch_size), p50_s=self.latency_s(batch_size) if self.latency_s else None,
            peak=peak, capacity=self.capacity,
        )
        result.memory.free_at_start_bytes = int(self.capacity * 0.95)  # a peak above it runs out of memory
        return result
