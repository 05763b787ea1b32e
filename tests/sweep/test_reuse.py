"""Process reuse: which sizes share a trial process (the policy, pure), and what a reused
process still guarantees (real trial processes on CPU): an out-of-memory or error ends
reuse and is confirmed in a fresh process, sizes near the edge run fresh, and the peak
memory of a size is its own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.sweep import records
from gpudoctor.sweep.records import Memory, TrialResult, TrialSpec
from gpudoctor.sweep.reuse import Decision, ReusePolicy, predict_peak, safe_share
from gpudoctor.sweep.runner import SubprocessRunner
from gpudoctor.sweep.search import SearchPlan, run_search
from gpudoctor.sweep.worker import LEFTOVER_LIMIT_BYTES, clean_up

from .fakes import GB, failed, point

TINY = str(Path(__file__).with_name("tiny_model.py"))
FREE = 100 * GB


def measured(size: int, peak: int, model: int = GB // 10) -> TrialResult:
    result = point(size, 100.0 * size, peak=peak, capacity=FREE)
    result.memory.free_at_start_bytes = FREE
    result.memory.model_bytes = model
    return result


def test_the_share_keeps_the_headroom_free_when_the_prediction_is_off_by_half() -> None:
    assert safe_share(0.1) == pytest.approx(0.6)
    assert safe_share(0.25) == pytest.approx(0.5)
    assert ReusePolicy.for_headroom(0.1).share == pytest.approx(0.6)


def test_prediction_from_one_size_is_an_upper_bound_then_from_the_slope() -> None:
    one = [measured(8, 2 * GB, model=GB)]
    assert predict_peak(one, 16) == 3 * GB  # (2 GB - 1 GB model) / 8 per sample, all of it
    two = [*one, measured(16, 3 * GB)]
    assert predict_peak(two, 64) == 3 * GB + 48 * GB // 8
    noisy = [measured(4, GB), measured(8, 5 * GB), measured(16, 6 * GB)]
    assert predict_peak(noisy, 32) == 6 * GB + 16 * GB  # the steeper of the last two slopes
    assert predict_peak([], 8) is None


def test_far_from_the_edge_reuses_near_it_runs_fresh() -> None:
    policy = ReusePolicy()
    history = [measured(64, 10 * GB), measured(128, 19 * GB)]
    assert not policy.decide([], 1).reuse  # the first size
    assert policy.decide(history, 256).reuse  # 37 GB of 100 GB free
    near = policy.decide(history, 512)  # 73 GB: past 60%
    assert not near.reuse and "near the memory edge" in near.reason


def test_an_out_of_memory_or_a_failure_ends_reuse_for_the_sweep() -> None:
    policy = ReusePolicy()
    ok = [measured(1, GB), measured(2, GB + GB // 100)]
    for status in (records.OOM, records.CUDA_ERROR, records.CRASHED, records.TIMEOUT):
        decision = policy.decide([*ok, failed(4, status), measured(3, GB)], 3)
        assert not decision.reuse and "reuse ended at batch 4" in decision.reason
    # a plain error of the target in its own fresh process: the next size starts fresh,
    # the ones after it may share a process again
    errored = [failed(1, records.ERROR), measured(2, GB)]
    assert not policy.decide(errored[:1], 2).reuse
    assert policy.decide(errored, 4).reuse


def test_no_memory_measured_means_a_fresh_process() -> None:
    blind = TrialResult(4, records.OK, timing=point(4, 10.0).timing, memory=Memory())
    assert not ReusePolicy().decide([blind], 8).reuse


class FakeCuda:
    """torch.cuda's memory calls, recorded."""

    def __init__(self, leftover: int) -> None:
        self.leftover = leftover
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> int:
            self.calls.append(name)
            return self.leftover if name == "memory_allocated" else 0

        return call


class FakeTorch:
    def __init__(self, leftover: int = 0) -> None:
        self.cuda = FakeCuda(leftover)
        self._C = type("C", (), {"_cuda_clearCublasWorkspaces": staticmethod(lambda: self.cuda.calls.append("cublas"))})

    @staticmethod
    def device(kind: str, index: int) -> str:
        return f"{kind}:{index}"


def gpu_result(status: str = records.OK) -> TrialResult:
    return TrialResult(64, status, device={"type": "cuda", "index": 0})


def test_between_sizes_the_peak_statistics_are_reset_and_the_cache_emptied() -> None:
    torch = FakeTorch()
    assert clean_up(gpu_result(), torch) == (True, None, 0)
    calls = torch.cuda.calls
    assert calls.index("empty_cache") < calls.index("reset_peak_memory_stats")
    assert "cublas" in calls and "reset_accumulated_memory_stats" in calls  # alloc_retries start at 0 again


def test_a_process_that_cannot_be_cleaned_is_not_reused() -> None:
    reusable, why, left = clean_up(gpu_result(), FakeTorch(leftover=LEFTOVER_LIMIT_BYTES + 1))
    assert not reusable and "still allocated after batch 64" in (why or "") and left == LEFTOVER_LIMIT_BYTES + 1
    reusable, why, _ = clean_up(gpu_result(records.CUDA_ERROR), FakeTorch())
    assert not reusable and "sticky" in (why or "")


FAST = {"device": "cpu", "warmup_min_iters": 1, "warmup_min_s": 0.0, "min_iters": 3, "min_time_s": 0.01,
        "max_time_s": 0.2, "sample_gpu": False}


DEFAULT_POLICY = ReusePolicy()


def runner(
    tmp_path: Path, target: str, policy: ReusePolicy | None = DEFAULT_POLICY, mode: str = "infer"
) -> SubprocessRunner:
    spec = TrialSpec(target=f"{TINY}:{target}", mode=mode, batch_size=1, **FAST)  # type: ignore[arg-type]
    return SubprocessRunner(spec, tmp_path, timeout_s=120, reuse=policy)


def processes(tmp_path: Path) -> int:
    return len(list(tmp_path.glob("process-*.log")))


@pytest.fixture(autouse=True)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("TINY_OOM_ABOVE", raising=False)
    monkeypatch.delenv("TINY_STICKY_AT", raising=False)


@pytest.mark.integration
def test_sizes_far_from_the_edge_share_one_process(tmp_path: Path) -> None:
    with runner(tmp_path, "build") as run:
        results = [run(size) for size in (1, 2, 4)]
    assert [(r.status, r.process_reused) for r in results] == [("ok", False), ("ok", True), ("ok", True)]
    assert processes(tmp_path) == 1
    assert "start" in results[0].phase_s and "start" not in results[1].phase_s
    assert all(r.phase_s["call"] > 0 and "measure" in r.phase_s for r in results)


@pytest.mark.integration
def test_an_oom_in_a_reused_process_is_confirmed_fresh_and_ends_reuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_OOM_ABOVE", "2")
    with runner(tmp_path, "build") as run:
        outcome = run_search(SearchPlan(start=1, max_batch=16, bisect=False), run)
        later = run(1)
    first, second, oom = outcome.trials
    assert (first.process_reused, second.process_reused) == (False, True)
    assert oom.status == records.OOM and oom.batch_size == 4 and oom.process_reused is False
    assert oom.reuse_fallback and oom.reuse_fallback.startswith("first run, in a reused process: oom")
    assert later.status == records.OK and later.process_reused is False  # after an OOM: fresh for good
    assert processes(tmp_path) == 3


@pytest.mark.integration
def test_a_sticky_error_in_a_reused_process_ends_the_sweep_from_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINY_STICKY_AT", "2")
    with runner(tmp_path, "build") as run:
        outcome = run_search(SearchPlan(start=1, max_batch=16), run)
    assert [(t.batch_size, t.status, t.process_reused) for t in outcome.trials] == [
        (1, "ok", False), (2, "cuda_error", False)]
    assert outcome.failed and outcome.trials[1].reuse_fallback
    assert processes(tmp_path) == 2


@pytest.mark.integration
def test_sizes_near_the_edge_run_fresh(tmp_path: Path) -> None:
    # a share so small that every prediction is near the edge: each size gets its own process
    with runner(tmp_path, "build", ReusePolicy(share=1e-9)) as run:
        results = [run(size) for size in (1, 2, 4)]
    assert [r.process_reused for r in results] == [False, False, False]
    assert processes(tmp_path) == 3


@pytest.mark.integration
def test_without_a_policy_every_size_runs_fresh(tmp_path: Path) -> None:
    with runner(tmp_path, "build", None) as run:
        assert [run(size).process_reused for size in (1, 2)] == [False, False]
    assert processes(tmp_path) == 2


class AlwaysReuse(ReusePolicy):
    def decide(self, history: Sequence[TrialResult], size: int) -> Decision:
        return Decision(True, "this test")


@pytest.mark.integration
def test_the_peak_of_a_size_in_a_reused_process_is_its_own(tmp_path: Path) -> None:
    with runner(tmp_path, "wide", AlwaysReuse(), mode="train") as run:
        small_first = run(1)
        large = run(8192)
        small_after = run(1)
    assert small_after.process_reused and large.process_reused
    peaks = [r.memory.peak_rss_bytes or 0 for r in (small_first, large, small_after)]
    assert peaks[1] - peaks[0] > 20 * 2**20  # 8192 x 256 floats, in and out, and their gradients
    # not the large size's peak carried over: back within a few MB of the first small size
    assert abs(peaks[2] - peaks[0]) < 8 * 2**20, [p / 2**20 for p in peaks]


def test_compiled_targets_always_run_fresh(tmp_path: Path) -> None:
    spec = TrialSpec(target=f"{TINY}:build", mode="infer", batch_size=1, compile=True)
    run = SubprocessRunner(spec, tmp_path, timeout_s=1, reuse=AlwaysReuse())
    run._process = object()  # type: ignore[assignment]  # as if a process were waiting
    decision = run.decide(2)
    assert not decision.reuse and "--compile" in decision.reason
