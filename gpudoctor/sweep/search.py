"""Which batch sizes to try, in what order: the search, independent of how a trial runs.

Search mode: double from `start` (the last step is `max_batch` itself) until a size
runs out of memory, reaches `max_batch`, or its p50 latency exceeds the budget; then
bisect between the largest size that fit and the smallest that did not, until the
edge is known within 1/16 of its size (midpoints above 64 are rounded to a multiple
of 8, which tensor cores like), in at most `max_bisect` (4) trials. Once the edge is
bracketed and the knee lies below it, a bisection size only has to say whether it
fits: it runs as a fit probe (a few timed iterations, `probe_runner`), which costs a
fraction of a measured size (its timing counts for nothing but memory).
Explicit mode: exactly the sizes given, ascending; sizes above one that ran out of
memory are skipped.

Failures: a sticky CUDA error or a crashed trial stops the search at once (never
retried); a plain exception from the target is recorded and the search goes on (some
are size-specific: BatchNorm refuses batch 1 in training), unless the same error
comes back or three sizes in a row fail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from gpudoctor.sweep import records
from gpudoctor.sweep.analysis import throughput_knee
from gpudoctor.sweep.records import TrialResult

EDGE_RESOLUTION = 16  # bisection stops when hi - lo <= lo / 16
MAX_BISECT_TRIALS = 4  # ... or after this many trials: a 1/16 bracket of a doubling step takes 4
ROUND_ABOVE = 64
ROUND_TO = 8
MAX_CONSECUTIVE_ERRORS = 3


@dataclass(frozen=True)
class SearchPlan:
    start: int = 1
    max_batch: int = 4096
    batch_sizes: tuple[int, ...] | None = None  # explicit: exactly these
    latency_p50_budget_s: float | None = None
    bisect: bool = True
    max_bisect: int = MAX_BISECT_TRIALS

    @property
    def mode(self) -> str:
        return "explicit" if self.batch_sizes else "search"


@dataclass
class SearchOutcome:
    trials: list[TrialResult] = field(default_factory=list)  # in the order they ran
    stop_reason: str = ""
    failed: bool = False  # stopped on a failure of the target (not OOM, not a limit)
    interrupted: bool = False


class TargetRejected(Exception):
    """A trial said the target is unusable (bad input); the sweep must end now."""

    def __init__(self, result: TrialResult) -> None:
        super().__init__(result.message or "the target cannot be used")
        self.result = result


def doubling_sizes(start: int, max_batch: int) -> list[int]:
    sizes = []
    size = start
    while size < max_batch:
        sizes.append(size)
        size *= 2
    sizes.append(max_batch)
    return sizes


def midpoint(lo: int, hi: int) -> int | None:
    """The next size to try between a fitting `lo` and a failing `hi`, or None when done."""
    if hi - lo <= max(1, lo // EDGE_RESOLUTION):
        return None
    mid = (lo + hi) // 2
    if lo >= ROUND_ABOVE:
        mid = round(mid / ROUND_TO) * ROUND_TO
    return mid if lo < mid < hi else None


class _Search:
    def __init__(self, plan: SearchPlan, runner: Callable[[int], TrialResult],
                 progress: Callable[[TrialResult], None] | None,
                 probe_runner: Callable[[int], TrialResult] | None = None) -> None:
        self.plan = plan
        self.runner = runner
        self.probe_runner = probe_runner
        self.progress = progress or (lambda result: None)
        self.outcome = SearchOutcome()
        self._errors: list[str] = []

    def run(self, size: int, probe: bool = False) -> TrialResult:
        if probe and self.probe_runner is not None:
            result = dataclasses.replace(self.probe_runner(size), fit_probe=True)
        else:
            result = self.runner(size)
        self.record(result)
        if result.status == records.BAD_TARGET:
            raise TargetRejected(result)
        return result

    def record(self, result: TrialResult) -> None:
        self.outcome.trials.append(result)
        self.progress(result)

    def fatal(self, result: TrialResult) -> bool:
        """True (and the stop reason set) when this failure must end the search."""
        size, message = result.batch_size, result.message or result.status
        if result.status in (records.CUDA_ERROR, records.CRASHED):
            what = "CUDA error" if result.status == records.CUDA_ERROR else "trial crashed"
            self.outcome.stop_reason = f"{what} at batch {size} (not retried): {message}"
            self.outcome.failed = True
            return True
        if result.status != records.ERROR:
            self._errors.clear()
            return False
        repeated = message in self._errors
        self._errors.append(message)
        if repeated or len(self._errors) >= MAX_CONSECUTIVE_ERRORS:
            why = "the same error at two sizes" if repeated else f"{len(self._errors)} sizes in a row failed"
            self.outcome.stop_reason = f"stopped: {why}; last at batch {size}: {message}"
            self.outcome.failed = True
            return True
        return False

    def over_budget(self, result: TrialResult) -> bool:
        budget = self.plan.latency_p50_budget_s
        return budget is not None and result.timing is not None and result.timing.latency_p50_s > budget

    def grow(self) -> tuple[int, int | None]:
        """Doubling phase; returns (largest size that fit, smallest that ran out of memory)."""
        plan, lo = self.plan, 0
        for size in doubling_sizes(plan.start, plan.max_batch):
            result = self.run(size)
            if result.ok:
                lo = size
                if self.over_budget(result):
                    p50, budget = result.timing.latency_p50_s, plan.latency_p50_budget_s  # type: ignore[union-attr]
                    self.outcome.stop_reason = (
                        f"p50 latency {p50 * 1e3:.3g} ms over the {budget * 1e3:g} ms budget "  # type: ignore[operator]
                        f"at batch {size}"
                    )
                    return lo, None
            elif result.status == records.OOM:
                self.outcome.stop_reason = f"out of memory at batch {size}"
                return lo, size
            elif result.status == records.TIMEOUT:
                self.outcome.stop_reason = f"batch {size}: {result.message}"
                return lo, None
            if self.fatal(result):
                return lo, None
        self.outcome.stop_reason = f"reached the size limit ({plan.max_batch})"
        return lo, None

    def past_the_knee(self, size: int) -> bool:
        """The measured sizes already show a knee below `size`: its throughput is known to
        be flat there, only whether it fits is not."""
        knee = throughput_knee(self.outcome.trials).batch_size
        return knee is not None and knee < size

    def bisect(self, lo: int, hi: int) -> None:
        trials = 0
        while (size := midpoint(lo, hi)) is not None:
            if trials >= self.plan.max_bisect:
                self.outcome.stop_reason += (f"; memory edge bisected to between {lo} and {hi} "
                                             f"(at most {self.plan.max_bisect} bisection sizes)")
                return
            trials += 1
            result = self.run(size, probe=self.past_the_knee(size))
            if result.ok:
                lo = size
            elif result.status == records.OOM:
                hi = size
            else:
                if not self.fatal(result):
                    self.outcome.stop_reason += f"; bisection stopped at batch {size}: {result.message}"
                return
        self.outcome.stop_reason += f"; memory edge bisected to between {lo} and {hi}"

    def explicit(self, sizes: list[int]) -> None:
        oom_at: int | None = None
        for index, size in enumerate(sizes):
            if oom_at is not None:
                self.record(
                    TrialResult(size, records.SKIPPED, message=f"larger than {oom_at}, which ran out of memory")
                )
                continue
            result = self.run(size)
            if result.status == records.OOM:
                oom_at = size
            elif self.fatal(result):
                for rest in sizes[index + 1 :]:
                    self.record(TrialResult(rest, records.SKIPPED, message="not run: the sweep stopped"))
                return
        self.outcome.stop_reason = (
            f"out of memory at batch {oom_at}; larger sizes skipped"
            if oom_at
            else f"measured the {len(sizes)} sizes given"
        )


def run_search(
    plan: SearchPlan,
    runner: Callable[[int], TrialResult],
    progress: Callable[[TrialResult], None] | None = None,
    probe_runner: Callable[[int], TrialResult] | None = None,
) -> SearchOutcome:
    """Run the plan; TargetRejected propagates, Ctrl-C ends it with what was measured.
    `probe_runner` runs the bisection's sizes past the knee as fit probes."""
    search = _Search(plan, runner, progress, probe_runner)
    try:
        if plan.batch_sizes:
            search.explicit(sorted(set(plan.batch_sizes)))
        else:
            lo, hi = search.grow()
            if hi is not None and plan.bisect:
                search.bisect(lo, hi)
    except KeyboardInterrupt:
        search.outcome.interrupted = True
        search.outcome.stop_reason = "interrupted (Ctrl-C or SIGTERM)"
    return search.outcome
