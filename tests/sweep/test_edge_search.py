"""The edge search past the knee, against a synthetic GPU (SYNTHETIC: made-up curves of
known shape, not measurements): which sizes run, how many, whether the memory edge is
found within the stated resolution, and that the knee equals the exhaustive search's.

Issue 27, item 27: ResNet-50 training on an H200 (knee 256, memory edge 1664-1728) took
350 s, doubling in full through every size to the first OOM and then bisecting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from gpudoctor.sweep import records
from gpudoctor.sweep.analysis import analyze
from gpudoctor.sweep.records import Memory, TrialResult
from gpudoctor.sweep.search import (
    BOUND_FACTOR,
    EDGE_RESOLUTION,
    MAX_EDGE_TRIALS,
    SearchPlan,
    on_grid,
    predict_edge,
    run_search,
)

from .fakes import point

MIB = 2**20
GIB = 2**30


@dataclass
class SyntheticGpu:
    """A made-up GPU and model: throughput rate(b), peak memory peak(b), and `free` bytes
    available: a size whose peak is above `free` runs out of memory. `log` says which
    sizes ran in full ("full") and which as fit probes ("probe"), in order."""

    rate: Callable[[int], float]
    peak: Callable[[int], float]
    free: int
    capacity: int = 141 * 10**9
    memory_measured: bool = True
    log: list[tuple[int, str]] = field(default_factory=list)

    def fits(self, size: int) -> bool:
        return self.peak(size) <= self.free

    def largest_fit(self, limit: int = 8192) -> int:
        return max(b for b in range(1, limit + 1) if self.fits(b))

    def _trial(self, size: int, kind: str) -> TrialResult:
        self.log.append((size, kind))
        if not self.fits(size):
            return TrialResult(size, records.OOM, message="CUDA out of memory (synthetic)",
                               memory=Memory(capacity_bytes=self.capacity, free_at_start_bytes=self.free))
        result = point(size, self.rate(size), peak=int(self.peak(size)) if self.memory_measured else None,
                       capacity=self.capacity)
        result.memory.free_at_start_bytes = self.free
        return result

    def full(self, size: int) -> TrialResult:
        return self._trial(size, "full")

    def probe(self, size: int) -> TrialResult:
        return self._trial(size, "probe")

    def sizes(self, kind: str) -> list[int]:
        return [size for size, k in self.log if k == kind]


def linear(fixed: float, per_sample: float) -> Callable[[int], float]:
    return lambda b: fixed + per_sample * b


def flat_after(knee: int, peak_rate: float = 3000.0) -> Callable[[int], float]:
    return lambda b: peak_rate * min(b, knee) / knee


def resnet50_h200_like() -> SyntheticGpu:
    """SYNTHETIC, shaped after the H200 run of issue 27: throughput flat from 256 on,
    139 GiB free, 4 GiB fixed, the edge between 1664 and 1728 (1700 fits, 1701 does not:
    about 81 MiB a sample)."""
    free, fixed = 139 * GIB, 4 * GIB
    return SyntheticGpu(flat_after(256), linear(fixed, (free - fixed) / 1700.5), free=free)


def exhaustive(gpu: SyntheticGpu, plan: SearchPlan) -> tuple[int | None, list[int]]:
    """The previous search on a copy of `gpu`: every doubling size in full to the first
    OOM, then midpoints, all in full. Returns (knee, the sizes it ran)."""
    copy = SyntheticGpu(gpu.rate, gpu.peak, gpu.free, gpu.capacity, gpu.memory_measured)
    plan = SearchPlan(start=plan.start, max_batch=plan.max_batch, predict_edge=False, max_edge_trials=8)
    outcome = run_search(plan, copy.full)
    return analyze(outcome.trials, 0.1, None).knee.batch_size, [size for size, _ in copy.log]


def check_edge(gpu: SyntheticGpu, trials: list[TrialResult]) -> tuple[int, int]:
    edge = analyze(trials, 0.1, None).memory
    lo, hi = edge.largest_fit, edge.smallest_oom
    assert lo is not None and hi is not None
    true_edge = gpu.largest_fit()
    assert lo <= true_edge < hi  # the bracket holds the true edge
    on_the_grid = [b for b in range(lo + 1, hi) if b < 64 or b % 8 == 0]
    assert hi - lo <= max(1, lo * EDGE_RESOLUTION) or not on_the_grid  # ... within the stated resolution
    return lo, hi


def test_the_h200_resnet50_curve_jumps_to_the_predicted_edge() -> None:
    gpu = resnet50_h200_like()
    plan = SearchPlan(max_batch=4096)
    outcome = run_search(plan, gpu.full, probe_runner=gpu.probe)
    # measured in full until the knee (256) shows, i.e. up to twice the knee ...
    assert gpu.sizes("full") == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    # ... then one probe just below the predicted edge (1700, minus 2%) and one just above,
    # 5% above the size that fit (an OOM there resolves the edge; a fit would prove the line low)
    assert gpu.sizes("probe") == [1664, 1744]
    assert len(gpu.log) == 12  # the previous search ran 16: 1..2048 in full, then 4 bisection probes
    assert check_edge(gpu, outcome.trials) == (1664, 1744)
    assert analyze(outcome.trials, 0.1, None).knee.batch_size == exhaustive(gpu, plan)[0] == 256
    assert all(t.fit_probe for t in outcome.trials if t.batch_size > 512)
    assert outcome.edge_prediction is not None and int(outcome.edge_prediction.batch_size) == 1700
    assert "memory edge bisected to between 1664 and 1744 (2 edge sizes" in outcome.stop_reason
    assert outcome.stop_reason.startswith("knee at batch 256 (sizes measured in full up to 512)")


def test_the_previous_search_is_one_option_away() -> None:
    gpu = resnet50_h200_like()
    outcome = run_search(SearchPlan(max_batch=4096, predict_edge=False), gpu.full, probe_runner=gpu.probe)
    assert gpu.sizes("full") == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    assert gpu.sizes("probe") == [1536, 1792, 1664, 1728]
    assert check_edge(gpu, outcome.trials) == (1664, 1728)


KNEES = [4, 16, 64, 256]
EDGES = [40, 100, 300, 777, 1700, 3000]


@pytest.mark.parametrize("knee", KNEES)
@pytest.mark.parametrize("edge", EDGES)
def test_knee_unchanged_and_edge_within_the_resolution(knee: int, edge: int) -> None:
    per_sample, fixed = 50 * MIB, 2 * GIB
    gpu = SyntheticGpu(flat_after(knee), linear(fixed, per_sample), free=int(fixed + (edge + 0.5) * per_sample))
    plan = SearchPlan(max_batch=4096)
    outcome = run_search(plan, gpu.full, probe_runner=gpu.probe)
    knee_found = analyze(outcome.trials, 0.1, None).knee.batch_size
    old_knee, old_sizes = exhaustive(gpu, plan)
    assert knee_found == old_knee
    check_edge(gpu, outcome.trials)
    assert len(gpu.log) <= len(old_sizes)
    edge_trials = [size for size, _ in gpu.log if size > 2 * knee] if 4 * knee <= edge else []
    assert len(edge_trials) <= MAX_EDGE_TRIALS
    if 2 * knee < edge:  # the knee shows before memory runs out: sizes past it are probes
        assert gpu.sizes("full")[-1] == 2 * knee
        assert len(gpu.sizes("probe")) <= 3  # a straight line is predicted exactly: a bracket, then at most one more


def test_a_throughput_still_climbing_at_the_edge_is_measured_in_full() -> None:
    per_sample, fixed = 50 * MIB, 2 * GIB
    gpu = SyntheticGpu(lambda b: 10.0 * b, linear(fixed, per_sample), free=int(fixed + 1700.5 * per_sample))
    outcome = run_search(SearchPlan(max_batch=4096), gpu.full, probe_runner=gpu.probe)
    assert gpu.sizes("probe") == []  # no knee: the edge may be the recommendation
    assert gpu.sizes("full")[:12] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    # the OOM at 2048 is bracketed by the prediction: just below 1700, then just above
    assert gpu.sizes("full")[12:] == [1664, 1784][:len(gpu.sizes("full")) - 12] or len(gpu.log) <= 12 + 3
    check_edge(gpu, outcome.trials)
    assert analyze(outcome.trials, 0.1, None).knee.batch_size is None


@pytest.mark.parametrize("curve", ["sublinear", "superlinear"])
def test_a_curved_memory_line_still_finds_the_edge_within_the_bound(curve: str) -> None:
    """Workspaces that shrink near the edge (the prediction falls short) or grow (it
    overshoots): the bracket still holds the edge, in at most MAX_EDGE_TRIALS sizes."""
    per_sample, fixed = 90 * MIB, 4 * GIB
    bend = -0.12 if curve == "sublinear" else 0.12

    def peak(b: int) -> float:
        return fixed + per_sample * b * (1 + bend * max(0, b - 512) / 2048)

    free = int(peak(1700) + 1)
    gpu = SyntheticGpu(flat_after(128), peak, free=free)
    outcome = run_search(SearchPlan(max_batch=4096), gpu.full, probe_runner=gpu.probe)
    assert gpu.sizes("full") == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert 2 <= len(gpu.sizes("probe")) <= MAX_EDGE_TRIALS
    edge = analyze(outcome.trials, 0.1, None).memory
    lo, hi = edge.largest_fit, edge.smallest_oom
    assert lo is not None and hi is not None and lo <= 1700 < hi
    if "at most" not in outcome.stop_reason:
        check_edge(gpu, outcome.trials)


def test_an_edge_past_the_size_limit_is_one_probe_of_the_limit() -> None:
    per_sample, fixed = 1 * MIB, 1 * GIB
    gpu = SyntheticGpu(flat_after(64), linear(fixed, per_sample), free=int(fixed + 100_000 * per_sample))
    outcome = run_search(SearchPlan(max_batch=4096), gpu.full, probe_runner=gpu.probe)
    assert gpu.sizes("full") == [1, 2, 4, 8, 16, 32, 64, 128]
    assert gpu.sizes("probe") == [4096]
    assert "reached the size limit (4096), which fits" in outcome.stop_reason
    assert analyze(outcome.trials, 0.1, None).knee.batch_size == 64


def test_without_peak_memory_the_probes_double() -> None:
    per_sample, fixed = 50 * MIB, 2 * GIB
    gpu = SyntheticGpu(flat_after(16), linear(fixed, per_sample), free=int(fixed + 300.5 * per_sample),
                       memory_measured=False)
    outcome = run_search(SearchPlan(max_batch=4096), gpu.full, probe_runner=gpu.probe)
    assert gpu.sizes("full") == [1, 2, 4, 8, 16, 32]
    # no line to predict from: doubling as probes, then midpoints (these count towards the bound)
    assert gpu.sizes("probe") == [64, 128, 256, 512, 384, 320, 288, 304, 296]
    assert outcome.edge_prediction is None
    check_edge(gpu, outcome.trials)


def test_a_knee_on_unstable_sizes_keeps_measuring_in_full() -> None:
    """A noisy dip at twice the knee (a busy host) must not end the throughput curve: the
    jump waits for a knee whose sizes were measured stable."""
    gpu = resnet50_h200_like()
    full = gpu.full

    def noisy(size: int) -> TrialResult:
        result = full(size)
        if result.timing is not None and size in (256, 512):
            result.timing.stable = False
        return result

    run_search(SearchPlan(max_batch=4096), noisy, probe_runner=gpu.probe)
    assert gpu.sizes("full") == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]  # 1024 stable: the knee holds
    assert gpu.sizes("probe") == [1664, 1744]


def test_a_latency_budget_keeps_measuring_in_full() -> None:
    gpu = resnet50_h200_like()
    outcome = run_search(SearchPlan(max_batch=4096, latency_p50_budget_s=0.2), gpu.full, probe_runner=gpu.probe)
    assert gpu.sizes("probe") == []  # the latency limit needs measured sizes
    assert "over the 200 ms budget" in outcome.stop_reason


def test_no_bisect_is_the_plain_doubling() -> None:
    gpu = resnet50_h200_like()
    run_search(SearchPlan(max_batch=4096, bisect=False), gpu.full, probe_runner=gpu.probe)
    assert gpu.sizes("full") == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048] and gpu.sizes("probe") == []


def test_the_prediction_fits_the_largest_sizes() -> None:
    fixed = 4 * GIB
    per_sample = (139 * GIB - fixed) / 1700.5
    gpu = resnet50_h200_like()
    trials = [gpu.full(b) for b in (1, 2, 4, 128, 256, 512)]
    trials[0].memory.peak_reserved_bytes = int(50 * GIB)  # a small size's outlier is left out of the line
    predicted = predict_edge(trials)
    assert predicted is not None and predicted.sizes == (128, 256, 512)
    assert predicted.per_sample_bytes == pytest.approx(per_sample, rel=1e-6)
    assert predicted.fixed_bytes == pytest.approx(fixed, rel=1e-6)
    assert predicted.batch_size == pytest.approx(1700.5, abs=0.01)
    assert predict_edge(trials[:1]) is None  # one size: no line


def test_sizes_on_the_grid() -> None:
    assert on_grid(1666.5, up=False) == 1664 and on_grid(1734.5, up=True) == 1736
    assert on_grid(1664.0, up=True) == 1664 and on_grid(37.4, up=True) == 38 and on_grid(37.4, up=False) == 37


# The H200 run of 2026-12-04 (issue 27): ResNet-50 fp32 training, knee 256, the line through
# the peaks of 128-512 said 91.4 MiB a sample and an edge at ~1507, while sizes fitted up to
# 1664-1727 (1728 ran out of memory). Near the edge the caching allocator gives back the
# slack its reserve carried at smaller sizes (measured on the H200: 97.5 GiB reserved for
# 83.0 GiB allocated at 1024, 137.4 GiB for 134.7 GiB at 1664), so the reserved peak of a
# size that fits sits at the limit instead of on the line, and each refitted prediction
# stays just above the last size that fitted. The previous search crept up in 2-5% steps
# (1472, 1528, 1560, 1632, 1712: all fit, no bracket after five probes).
H200_FREE = int(137.9 * GIB)
H200_CAPACITY = int(139.8 * GIB)
LINE_PER_SAMPLE = 91.4 * MIB
LINE_FIXED = H200_FREE - 1507 * LINE_PER_SAMPLE  # the line through 128-512 meets the free memory at 1507
TRUE_EDGE = 1700


@dataclass
class LowLineGpu(SyntheticGpu):
    """SYNTHETIC: sizes up to `edge` fit; the peaks of the sizes measured in full lie on
    the line (edge predicted at 1507). `shape` says what a size past 512 that fits reports:
    "saturating" (the reserve squeezed to just under the free memory, as on the H200) or
    "concave" (the true curve, bending down to meet the free memory at `edge`)."""

    edge: int = TRUE_EDGE
    shape: str = "saturating"

    def fits(self, size: int) -> bool:
        return size <= self.edge

    def _trial(self, size: int, kind: str) -> TrialResult:
        result = super()._trial(size, kind)
        if result.ok:
            result.memory.peak_reserved_bytes = int(self.reported(size))
        return result

    def reported(self, size: int) -> float:
        on_the_line = LINE_FIXED + LINE_PER_SAMPLE * size
        if size <= 512:
            return on_the_line
        if self.shape == "saturating":
            return min(on_the_line, self.free - 0.3 * GIB)
        at_512 = LINE_FIXED + LINE_PER_SAMPLE * 512
        return at_512 + (self.free - at_512) * (size - 512) / (self.edge + 0.5 - 512)


def low_line_gpu(shape: str, edge: int = TRUE_EDGE, rate: Callable[[int], float] | None = None) -> LowLineGpu:
    return LowLineGpu(rate or flat_after(256), lambda b: 0.0, free=H200_FREE, capacity=H200_CAPACITY,
                      edge=edge, shape=shape)


@pytest.mark.parametrize("shape", ["saturating", "concave"])
def test_a_low_prediction_halves_the_gap_toward_the_bound(shape: str) -> None:
    gpu = low_line_gpu(shape)
    outcome = run_search(SearchPlan(max_batch=4096), gpu.full, probe_runner=gpu.probe)
    assert gpu.sizes("full") == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert outcome.edge_prediction is not None and round(outcome.edge_prediction.batch_size) == 1507
    probes = gpu.sizes("probe")
    assert len(probes) <= MAX_EDGE_TRIALS
    # no out-of-memory was seen: the bound, where the whole device would be full at 1/1.25
    # of the line's bytes a sample, is the size taken to fail; nothing above it is tried
    assert outcome.edge_bound == on_grid((H200_CAPACITY - LINE_FIXED) * BOUND_FACTOR / LINE_PER_SAMPLE, up=True)
    assert max(probes) <= outcome.edge_bound
    lo, hi = check_edge(gpu, outcome.trials)  # the edge, within 5%
    if shape == "concave":
        # the peaks the probes add refit the line: the jump from the first probe lands near the edge
        assert probes == [1472, 1648, 1728] and not outcome.prediction_low
        return
    # the peaks at the limit leave each refitted prediction just above the last fit: the size
    # 5% above it fits too, which proves the line low; from then on no small steps, each size
    # halves the gap between the largest fit and the smallest size known or taken to fail
    assert outcome.prediction_low and "which proved low" in outcome.stop_reason
    assert probes == [1472, 1544, (1544 + 1912) // 2, 1632, 1680] and outcome.edge_bound == 1912
    assert (lo, hi) == (1680, 1728)


@pytest.mark.parametrize("shape", ["saturating", "concave"])
def test_a_low_prediction_inside_a_bracket_halves_toward_the_oom(shape: str) -> None:
    """Throughput still climbing: every size is measured in full, to the OOM at 2048."""
    gpu = low_line_gpu(shape, rate=lambda b: 10.0 * b)
    gpu.reported = lambda size: LINE_FIXED + LINE_PER_SAMPLE * size if size <= 1024 else LowLineGpu.reported(gpu, size)
    outcome = run_search(SearchPlan(max_batch=4096), gpu.full, probe_runner=gpu.probe)
    ran = [size for size, _ in gpu.log]
    assert ran[:12] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    edge_sizes = ran[12:]
    assert len(edge_sizes) <= MAX_EDGE_TRIALS and max(edge_sizes) < 2048  # never at or above the known OOM
    check_edge(gpu, outcome.trials)
    if shape == "saturating":
        # 1472 fits as predicted, 1544 (above the line's edge) fits too: midpoints from then on
        assert edge_sizes == [1472, 1544, 1792, 1664, 1728] and outcome.prediction_low
        assert outcome.edge_bound is None  # an OOM was known: no bound derived
    else:
        assert edge_sizes == [1472, 1624, 1704]


@pytest.mark.parametrize("shape", ["saturating", "concave"])
@pytest.mark.parametrize("edge", [1480, 1520, 1600, 1700, 1800, 1900])
def test_an_edge_anywhere_up_to_the_bound_is_found_in_five_probes(shape: str, edge: int) -> None:
    gpu = low_line_gpu(shape, edge=edge)
    outcome = run_search(SearchPlan(max_batch=4096), gpu.full, probe_runner=gpu.probe)
    probes = gpu.sizes("probe")
    assert len(probes) <= MAX_EDGE_TRIALS and max(probes) <= (outcome.edge_bound or 0)
    check_edge(gpu, outcome.trials)


@pytest.mark.parametrize("shape", ["saturating", "concave"])
def test_an_edge_past_the_bound_moves_the_bound(shape: str) -> None:
    """A line that overstates the bytes a sample by more than BOUND_FACTOR: the size at the
    bound fits, the bound doubles; the search stops at its five sizes with what it knows."""
    gpu = low_line_gpu(shape, edge=2600)
    outcome = run_search(SearchPlan(max_batch=4096), gpu.full, probe_runner=gpu.probe)
    probes = gpu.sizes("probe")
    assert len(probes) <= MAX_EDGE_TRIALS and all(gpu.fits(size) or size > 2600 for size in probes)
    trials = outcome.trials
    edge = analyze(trials, 0.1, None).memory
    assert edge.largest_fit is not None and edge.largest_fit <= 2600
    assert edge.smallest_oom is None or edge.smallest_oom > 2600
