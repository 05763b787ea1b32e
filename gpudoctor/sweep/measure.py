"""Warm-up and the timed loop of one trial, with a host or a device timer.

On GPU the timer is CUDA events, so a time is the device's, not the host's view of an
asynchronous queue. How the iterations are separated follows the regime:
- infer: each batch is synchronised, as a server must before it answers; a latency is
  the device time from the start of the batch to its result (events around the step).
- train: no synchronisation per step, as in a real training loop where the host queues
  the next step while the device runs this one; a step time is the device time between
  consecutive step boundaries (events between steps). The loop synchronises only every
  chunk (about 0.25 s) to judge stability, as a loop that logs its loss would.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpudoctor.metrics import percentile
from gpudoctor.sweep.records import Timing
from gpudoctor.sweep.stability import StabilityRule, judge

CHUNK_MAX_S = 0.25


class Timer(Protocol):
    name: str

    def sync(self) -> None: ...

    def time_chunk(self, step: Callable[[], None], chunk_s: float, max_iters: int) -> list[float]: ...


class PerfCounterTimer:
    """CPU runs: the host clock is the device clock."""

    name = "perf_counter"

    def sync(self) -> None:
        pass

    def time_chunk(self, step: Callable[[], None], chunk_s: float, max_iters: int) -> list[float]:
        durations: list[float] = []
        start = time.perf_counter()
        while True:
            before = time.perf_counter()
            step()
            after = time.perf_counter()
            durations.append(after - before)
            if after - start >= chunk_s or len(durations) >= max_iters:
                return durations


class CudaEventTimer:
    def __init__(self, torch: Any, device: Any, sync_each: bool) -> None:
        self.name = "cuda_events"
        self._torch = torch
        self._device = device
        self._sync_each = sync_each

    def sync(self) -> None:
        self._torch.cuda.synchronize(self._device)

    def _event(self) -> Any:
        return self._torch.cuda.Event(enable_timing=True)

    def time_chunk(self, step: Callable[[], None], chunk_s: float, max_iters: int) -> list[float]:
        start = time.perf_counter()
        if self._sync_each:
            durations: list[float] = []
            while True:
                begin, end = self._event(), self._event()
                begin.record()
                step()
                end.record()
                end.synchronize()
                durations.append(begin.elapsed_time(end) / 1e3)
                if time.perf_counter() - start >= chunk_s or len(durations) >= max_iters:
                    return durations
        marks = [self._event()]
        marks[0].record()
        while True:
            step()
            mark = self._event()
            mark.record()
            marks.append(mark)
            if time.perf_counter() - start >= chunk_s or len(marks) - 1 >= max_iters:
                break
        marks[-1].synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(marks)]


WARMUP_SETTLE = 0.10  # a warm-up step more than 10% faster than every earlier one: still settling


@dataclass(frozen=True)
class WarmupRule:
    """Warm-up runs again at every size: autotuners and compilers work per shape.

    It ends once the step times stop falling: after at least `min_iters` iterations and
    `min_s`, the last step is not more than `settle` (10%) faster than the fastest
    earlier one (cuDNN's benchmark mode tries its algorithms in the first step at a
    new shape; the steps after it are the real ones). `max_s` bounds it.
    """

    min_iters: int = 2
    min_s: float = 0.2
    max_s: float = 120.0
    settle: float = WARMUP_SETTLE


@dataclass(frozen=True)
class Warmup:
    iterations: int
    seconds: float
    last_step_s: float  # the last warm-up step, synchronised: an estimate of a step's time
    reason: str


def warm_up(step: Callable[[], None], timer: Timer, rule: WarmupRule) -> Warmup:
    start = time.perf_counter()
    times: list[float] = []
    while True:
        before = time.perf_counter()
        step()
        timer.sync()  # the first iterations carry autotuning/compilation: let them finish
        after = time.perf_counter()
        times.append(after - before)
        elapsed = after - start
        n = len(times)
        if n >= max(2, rule.min_iters) and elapsed >= rule.min_s and times[-1] >= (1 - rule.settle) * min(times[:-1]):
            return Warmup(n, elapsed, times[-1], f"settled: the last of {n} steps ({times[-1] * 1e3:.3g} ms) is not "
                                                 f"{rule.settle:.0%} faster than the fastest before it")
        if elapsed >= rule.max_s:
            return Warmup(n, elapsed, times[-1], f"capped at {rule.max_s:g} s after {n} steps, step times still "
                                                 f"falling ({times[-1] * 1e3:.3g} ms last)")


def fit_check(step: Callable[[], None], timer: Timer, steps: int, batch_size: int) -> Timing:
    """`steps` steps, each synchronised, to learn whether the size fits: the first step
    allocates what autotuners and workspaces take, the ones after it what the optimizer
    adds (its state is made in the first step's update). No warm-up rule, no timed window:
    the host times below are for the record, not a throughput measurement."""
    times: list[float] = []
    start = time.perf_counter()
    for _ in range(max(1, steps)):
        before = time.perf_counter()
        step()
        timer.sync()
        times.append(time.perf_counter() - before)
    wall = time.perf_counter() - start
    after = times[1:] or times
    measured = sum(after)
    median = percentile(after, 50) or 0.0
    return Timing(
        timer="perf_counter",
        iterations=len(after),
        measured_s=measured,
        wall_s=wall,
        warmup_iterations=len(times) - len(after),
        warmup_s=times[0] if len(times) > len(after) else 0.0,
        step_time_mean_s=measured / len(after),
        step_time_median_s=median,
        latency_p50_s=median,
        latency_p90_s=percentile(after, 90) or 0.0,
        latency_p99_s=percentile(after, 99) or 0.0,
        samples_per_s=batch_size * len(after) / measured if measured > 0 else 0.0,
        stable=False,
        rel_ci_half_width=None,
        drift=None,
        stop_reason=f"fit check: {len(times)} steps to the peak memory, not timed",
        warmup_stop_reason="fit check: no warm-up (the first step is one of the steps)",
    )


def timed_loop(
    step: Callable[[], None],
    timer: Timer,
    rule: StabilityRule,
    batch_size: int,
    warmup: Warmup | None = None,
) -> Timing:
    durations: list[float] = []
    chunk_s = min(CHUNK_MAX_S, max(rule.min_time_s / 4, 0.01))
    # A chunk is bounded in steps as well as in host time: without a synchronisation per
    # step (training) the host queues steps faster than a large batch runs them, and a
    # chunk of host time could hold seconds of device time the stability rule cannot stop.
    step_s = warmup.last_step_s if warmup is not None else None
    start = time.perf_counter()
    while True:
        left = max(1, rule.max_iters - len(durations))
        per_chunk = left if not step_s else max(1, min(left, math.ceil(chunk_s / step_s)))
        durations += timer.time_chunk(step, chunk_s, per_chunk)
        step_s = statistics.median(durations)
        wall = time.perf_counter() - start
        verdict = judge(durations, wall, rule)
        if verdict.done:
            break
    measured = sum(durations)
    median = percentile(durations, 50) or 0.0
    return Timing(
        timer=timer.name,
        iterations=len(durations),
        measured_s=measured,
        wall_s=wall,
        warmup_iterations=warmup.iterations if warmup is not None else 0,
        warmup_s=warmup.seconds if warmup is not None else 0.0,
        step_time_mean_s=measured / len(durations),
        step_time_median_s=median,
        latency_p50_s=median,
        latency_p90_s=percentile(durations, 90) or 0.0,
        latency_p99_s=percentile(durations, 99) or 0.0,
        samples_per_s=batch_size * len(durations) / measured if measured > 0 else 0.0,
        stable=verdict.stable,
        rel_ci_half_width=verdict.rel_ci_half_width,
        drift=verdict.drift,
        stop_reason=verdict.reason,
        warmup_stop_reason=warmup.reason if warmup is not None else None,
    )
