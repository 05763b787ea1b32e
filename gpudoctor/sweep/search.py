"""Which batch sizes to try, in what order: the search, independent of how a trial runs.

Search mode:
1. Double from `start` (the last step is `max_batch` itself), measuring each size in
   full, until the throughput knee is found (the knee rule needs a size twice the
   knee: gpudoctor.sweep.analysis) and the largest size measured was stable, a size
   runs out of memory, reaches `max_batch`, or its p50 latency exceeds the budget.
2. Past the knee only the memory edge is left to find, and sizes past the knee run as
   fit probes (a few steps, to the peak memory, untimed: `probe_runner`); their
   throughput is not measured. A straight line through the peak memory of the largest
   sizes measured (`predict_edge`) predicts where memory runs out; the search jumps
   there instead of doubling through every size: a probe just below the predicted edge
   (2% under it), then one just above it (5% above the largest size that fit: an OOM
   there resolves the edge), each prediction refitted with the peaks the probes add.
   A size at or above the predicted edge that fits proves the line low (near the edge
   the caching allocator gives back the slack its peaks carried at smaller sizes, and
   cuDNN settles for smaller workspaces): from then on each size halves the gap between
   the largest size that fit and the smallest known or taken to fail: the first OOM,
   or while there is none `upper_bound` (the size that would fill the device's whole
   memory at 1/BOUND_FACTOR of the line's bytes a sample). No size goes above that
   bound unless one at the bound fits (the bound then doubles). Without a usable fit it
   doubles (as probes). With a latency budget it keeps doubling in full (the latency
   limit needs measured sizes), as it does while no knee is found.
3. Once one size fits and a larger one does not, the bracket is narrowed until the
   edge is known within EDGE_RESOLUTION (5%) of the size that fits (sizes above 64 are
   multiples of 8, which tensor cores like: no multiple of 8 between the two also ends
   it), by the prediction where it has one (alternating with plain midpoints when it
   overshoots; only midpoints once it proved low) and by midpoints otherwise. Steps 2
   and 3 together try at most `max_edge_trials` (5) sizes. When the knee lies below a
   size it runs as a fit probe; otherwise (the throughput still climbs: the edge may be
   the recommendation) it is measured in full.
`predict_edge=False` is the previous search: doubling in full to the first OOM, then
midpoints. `bisect=False` keeps only the doubling in full, to the first OOM.

Explicit mode: exactly the sizes given, ascending; sizes above one that ran out of
memory are skipped.

Failures: a sticky CUDA error or a crashed trial stops the search at once (never
retried); a plain exception from the target is recorded and the search goes on (some
are size-specific: BatchNorm refuses batch 1 in training), unless the same error
comes back or three sizes in a row fail.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpudoctor.metrics import format_bytes
from gpudoctor.sweep import records
from gpudoctor.sweep.analysis import linear_fit, ok_points, throughput_knee
from gpudoctor.sweep.records import TrialResult

EDGE_RESOLUTION = 0.05  # the edge search stops once hi - lo <= 5% of lo
MAX_EDGE_TRIALS = 5  # ... or after this many sizes past the knee / in the bracket
EDGE_MARGIN = 0.02  # probes 2% below and 2% above a predicted edge: a 4% bracket if it is right
FIT_POINTS = 3  # the peak-memory line goes through the largest sizes measured (small ones are mostly fixed cost)
# While no size has run out of memory, the edge search takes a size to fail once the
# device's whole memory would be full at 1/BOUND_FACTOR of the line's bytes a sample. The
# line overstates the bytes a sample needs near the edge: on the H200 (ResNet-50 fp32
# training) it said 91.4 MiB a sample from sizes 128-512, and sizes fitted up to 80.6 MiB a
# sample (allocated; the allocator's cached slack, about 15% of its reserve at mid sizes, is
# given back under pressure). 1.25 leaves room for 20% more than that.
BOUND_FACTOR = 1.25
ROUND_ABOVE = 64
ROUND_TO = 8
MAX_CONSECUTIVE_ERRORS = 3


@dataclass(frozen=True)
class SearchPlan:
    start: int = 1
    max_batch: int = 4096
    batch_sizes: tuple[int, ...] | None = None  # explicit: exactly these
    latency_p50_budget_s: float | None = None
    bisect: bool = True  # False: doubling in full to the first OOM, no edge search
    max_edge_trials: int = MAX_EDGE_TRIALS
    predict_edge: bool = True  # False: double through every size in full, then midpoints

    @property
    def mode(self) -> str:
        return "explicit" if self.batch_sizes else "search"


@dataclass(frozen=True)
class EdgePrediction:
    """Where a straight line through the measured peaks meets the memory available."""

    batch_size: float  # the predicted largest size that fits (not rounded)
    per_sample_bytes: float
    fixed_bytes: float
    limit_bytes: int  # the least free memory a trial started with (capacity when unknown)
    sizes: tuple[int, ...]  # the sizes the line goes through


@dataclass
class SearchOutcome:
    trials: list[TrialResult] = field(default_factory=list)  # in the order they ran
    stop_reason: str = ""
    failed: bool = False  # stopped on a failure of the target (not OOM, not a limit)
    interrupted: bool = False
    edge_prediction: EdgePrediction | None = None  # the first prediction the edge search used
    edge_bound: int | None = None  # the size taken to fail while no OOM was seen (the last one used)
    prediction_low: bool = False  # a size at or above the predicted edge fitted: halving toward the bound


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


def resolved(lo: int, hi: int) -> bool:
    """The edge is known well enough: the bracket is within EDGE_RESOLUTION of `lo`."""
    return hi - lo <= max(1.0, lo * EDGE_RESOLUTION)


def on_grid(value: float, up: bool) -> int:
    """`value` rounded up or down to a size worth trying (a multiple of 8 from 64 on)."""
    step = ROUND_TO if value >= ROUND_ABOVE else 1
    units = value / step
    return int(math.ceil(units - 1e-9) if up else math.floor(units + 1e-9)) * step


def midpoint(lo: int, hi: int) -> int | None:
    """The next size to try between a fitting `lo` and a failing `hi`, or None when done."""
    if resolved(lo, hi):
        return None
    mid = (lo + hi) // 2
    if lo >= ROUND_ABOVE:
        mid = round(mid / ROUND_TO) * ROUND_TO
    return mid if lo < mid < hi else None


def predict_edge(trials: Sequence[TrialResult]) -> EdgePrediction | None:
    """The largest size that should fit, from the peaks measured so far (fit probes too);
    None without two sizes with a peak, a growing line, or a known memory limit."""
    peaks: dict[int, int] = {}
    for trial in trials:
        if trial.ok and trial.memory.peak_bytes is not None:
            peaks[trial.batch_size] = trial.memory.peak_bytes
    points = sorted(peaks.items())[-FIT_POINTS:]
    fit = linear_fit([float(s) for s, _ in points], [float(p) for _, p in points]) if len(points) >= 2 else None
    if fit is None or fit[0] <= 0:
        return None
    free = [t.memory.free_at_start_bytes for t in trials if t.memory.free_at_start_bytes]
    capacity = [t.memory.capacity_bytes for t in trials if t.memory.capacity_bytes]
    limit = min(free) if free else min(capacity) if capacity else None
    if limit is None:
        return None
    slope, intercept, _ = fit
    edge = (limit - intercept) / slope
    if edge <= 0:
        return None
    return EdgePrediction(edge, slope, intercept, limit, tuple(s for s, _ in points))


def upper_bound(predicted: EdgePrediction, trials: Sequence[TrialResult]) -> int:
    """The smallest size the edge search takes to run out of memory while none has: where
    the device's whole memory (its capacity, not the free memory the prediction is made
    against) would be full at 1/BOUND_FACTOR of the line's bytes a sample, beyond the
    line's fixed bytes; never below BOUND_FACTOR times the predicted edge."""
    capacity = max((t.memory.capacity_bytes for t in trials if t.memory.capacity_bytes), default=0)
    room = (max(capacity, predicted.limit_bytes) - max(0.0, predicted.fixed_bytes)) / predicted.per_sample_bytes
    return on_grid(max(room, predicted.batch_size) * BOUND_FACTOR, up=True)


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
        self._expect_fit: bool | None = None  # what the last guided edge size was expected to do
        self._missed = False  # ... and it did the opposite: a midpoint next
        self.first_prediction: EdgePrediction | None = None
        self._doubled = False  # the last unbracketed edge size was a plain doubling (no prediction)
        self._guess: float | None = None  # the predicted edge the last edge size was chosen by
        self.low = False  # a size at or above the predicted edge fitted: the line is low, halve the gap
        self.bound: int | None = None  # while no OOM is known: the size taken to fail (upper_bound)

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

    def knee(self) -> int | None:
        return throughput_knee(self.outcome.trials).batch_size

    def may_jump(self) -> bool:
        """Past a found knee only the memory edge is left: no more sizes measured in full.
        Only once the largest size measured was stable: a noisy dip at twice the knee (a
        busy host) would otherwise end the throughput curve early; such a curve keeps
        doubling in full until a stable size confirms (or moves) the knee."""
        plan = self.plan
        knee = self.knee()
        if not (plan.predict_edge and plan.bisect and plan.latency_p50_budget_s is None and knee is not None):
            return False
        measured = ok_points(self.outcome.trials)
        return bool(measured) and measured[-1].timing is not None and measured[-1].timing.stable

    def grow(self) -> tuple[int, int | None, bool]:
        """Doubling phase: (largest size that fit, smallest that ran out of memory, whether
        it stopped at the knee to search the edge with probes)."""
        plan, lo = self.plan, 0
        for size in doubling_sizes(plan.start, plan.max_batch):
            if lo and self.may_jump():
                self.outcome.stop_reason = (f"knee at batch {self.knee()} (sizes measured in full up to {lo}); "
                                            f"larger sizes probed for memory only")
                return lo, None, True
            result = self.run(size)
            if result.ok:
                lo = size
                if self.over_budget(result):
                    p50, budget = result.timing.latency_p50_s, plan.latency_p50_budget_s  # type: ignore[union-attr]
                    self.outcome.stop_reason = (
                        f"p50 latency {p50 * 1e3:.3g} ms over the {budget * 1e3:g} ms budget "  # type: ignore[operator]
                        f"at batch {size}"
                    )
                    return lo, None, False
            elif result.status == records.OOM:
                self.outcome.stop_reason = f"out of memory at batch {size}"
                return lo, size, False
            elif result.status == records.TIMEOUT:
                self.outcome.stop_reason = f"batch {size}: {result.message}"
                return lo, None, False
            if self.fatal(result):
                return lo, None, False
        self.outcome.stop_reason = f"reached the size limit ({plan.max_batch})"
        return lo, None, False

    def past_the_knee(self, size: int) -> bool:
        """The measured sizes already show a knee below `size`: its throughput is known to
        be flat there, only whether it fits is not."""
        knee = self.knee()
        return knee is not None and knee < size

    def prediction(self) -> EdgePrediction | None:
        if not self.plan.predict_edge:
            return None
        predicted = predict_edge(self.outcome.trials)
        if predicted is not None and self.first_prediction is None:
            self.first_prediction = predicted
        return predicted

    def next_size(self, lo: int, hi: int | None) -> int | None:
        """The next size of the edge search; None when the edge is resolved or the limit fits."""
        self._guess = None
        if hi is not None:
            return self._inside(lo, hi)
        if lo >= self.plan.max_batch:
            return None
        predicted = self.prediction()
        if predicted is not None and self.bound is None:
            self.bound = upper_bound(predicted, self.outcome.trials)
        self._doubled = predicted is None and self.bound is None
        if self.bound is None:
            return min(2 * lo, self.plan.max_batch)  # no line to predict from: doubling
        if self.bound <= lo:  # a size at the bound fitted: the bound was wrong, double it
            self.bound = on_grid(2 * lo, up=True)
        if predicted is not None and predicted.batch_size < lo:
            self.low = True  # the refitted line says a size that fitted does not fit
        if self.low or predicted is None:
            return self._toward(lo, self.bound)
        below = on_grid(predicted.batch_size * (1 - EDGE_MARGIN), up=False)
        if below - lo > max(1.0, lo * EDGE_RESOLUTION):
            size = below  # jump to just below the predicted edge
        else:
            # at the prediction already (or past it): the largest size where an OOM still
            # resolves the edge; a fit there proves the line low
            size = max(on_grid(lo * (1 + EDGE_RESOLUTION), up=False), on_grid(lo + 1, up=True))
        self._guess = predicted.batch_size
        return min(size, self.bound, self.plan.max_batch)

    def _toward(self, lo: int, hi: int) -> int:
        """Halve the gap between a fitting `lo` and the size `hi` taken to fail; the bound
        itself once `lo` is within the resolution of it."""
        mid = midpoint(lo, hi)
        return min(mid if mid is not None else hi, self.plan.max_batch)

    def _inside(self, lo: int, hi: int) -> int | None:
        """A size strictly between a fitting `lo` and a failing `hi`: the predicted edge
        where there is one (alternating with a midpoint after a miss), else the midpoint."""
        mid = midpoint(lo, hi)
        if mid is None:
            return None
        predicted = self.prediction()
        if predicted is None or self._missed or self.low:
            return mid
        lowest = lo * (1 + EDGE_RESOLUTION)  # an OOM at or below it resolves the bracket
        highest = hi / (1 + EDGE_RESOLUTION)  # a fit at or above it does
        edge = predicted.batch_size
        if edge >= highest:  # the edge should be just below the OOM
            size, expect_fit = on_grid(highest, up=True), True
        elif edge <= lowest:  # ... or just above the fit
            size, expect_fit = on_grid(lowest, up=False), False
        else:
            size, expect_fit = on_grid(max(edge * (1 - EDGE_MARGIN), lowest), up=False), True
        if not lo < size < hi:
            return mid
        self._expect_fit = expect_fit
        self._guess = edge
        return size

    def edge(self, lo: int, hi: int | None) -> None:
        """Find the memory edge from a fitting `lo` (0: none) and a failing `hi` (None: not
        yet bracketed), in at most `max_edge_trials` sizes."""
        tried = 0  # sizes chosen by the prediction or a midpoint (a plain doubling is bounded by max_batch)
        while (size := self.next_size(lo, hi)) is not None and size > lo:
            doubling = hi is None and self._doubled
            if not doubling and tried >= self.plan.max_edge_trials:
                self.outcome.stop_reason += self._edge_words(lo, hi, tried, bounded=True)
                return
            tried += 0 if doubling else 1
            result = self.run(size, probe=self.past_the_knee(size))
            self._missed = self._expect_fit is not None and result.ok != self._expect_fit
            self._expect_fit = None
            if result.ok and self._guess is not None and size >= self._guess:
                self.low = True  # fits at or above the predicted edge: halve the gap from now on
            if result.ok:
                lo = size
            elif result.status == records.OOM:
                hi = size
            else:
                if not self.fatal(result):
                    self.outcome.stop_reason += f"; edge search stopped at batch {size}: {result.message}"
                return
        self.outcome.stop_reason += self._edge_words(lo, hi, tried, bounded=False)

    def _edge_words(self, lo: int, hi: int | None, tried: int, bounded: bool) -> str:
        predicted = self.first_prediction
        basis = (f"; predicted at ~{predicted.batch_size:.0f} from {format_bytes(int(predicted.per_sample_bytes))} "
                 f"a sample" if predicted is not None else "")
        if predicted is not None and self.low:
            bound = f" from the bound {self.bound}" if self.bound is not None else ""
            basis += f", which proved low: then halving the gap{bound}"
        sizes = f"{tried} edge size{'s' if tried != 1 else ''}{basis}"
        if hi is None and lo >= self.plan.max_batch:
            return f"; reached the size limit ({self.plan.max_batch}), which fits ({sizes})"
        if hi is None:
            return f"; no out-of-memory up to batch {lo} (at most {self.plan.max_edge_trials} edge sizes{basis})"
        if bounded:
            return f"; memory edge bisected to between {lo} and {hi} (at most {self.plan.max_edge_trials} edge sizes)"
        return f"; memory edge bisected to between {lo} and {hi} ({sizes})"

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
    `probe_runner` runs the sizes past the knee as fit probes (memory only)."""
    search = _Search(plan, runner, progress, probe_runner)
    try:
        if plan.batch_sizes:
            search.explicit(sorted(set(plan.batch_sizes)))
        else:
            lo, hi, jumped = search.grow()
            if jumped or (hi is not None and plan.bisect):
                search.edge(lo, hi)
    except KeyboardInterrupt:
        search.outcome.interrupted = True
        search.outcome.stop_reason = "interrupted (Ctrl-C or SIGTERM)"
    search.outcome.edge_prediction = search.first_prediction
    search.outcome.edge_bound = search.bound
    search.outcome.prediction_low = search.low
    return search.outcome
