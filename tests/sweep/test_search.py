"""The search against a fake runner: which sizes run, in what order, and when it stops."""

from __future__ import annotations

import dataclasses

import pytest

from gpudoctor.sweep import records
from gpudoctor.sweep.analysis import analyze
from gpudoctor.sweep.records import TrialResult
from gpudoctor.sweep.search import SearchPlan, TargetRejected, doubling_sizes, midpoint, run_search

from .fakes import FakeRunner, failed


def test_doubling_sizes_end_at_the_limit() -> None:
    assert doubling_sizes(1, 16) == [1, 2, 4, 8, 16]
    assert doubling_sizes(1, 100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert doubling_sizes(3, 20) == [3, 6, 12, 20]


def test_midpoints_round_to_multiples_of_8_above_64() -> None:
    assert midpoint(256, 512) == 384
    assert midpoint(384, 448) == 416
    assert midpoint(0, 64) == 32
    assert midpoint(2, 4) == 3
    assert midpoint(3, 4) is None
    assert midpoint(432, 448) is None  # within 1/16 of 432


def test_oom_at_512_is_bisected_to_the_edge() -> None:
    runner = FakeRunner(fits_up_to=400)
    outcome = run_search(SearchPlan(max_batch=4096, predict_edge=False), runner)
    assert runner.calls == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 384, 448, 416, 400]
    assert not outcome.failed
    assert "between 400 and 416" in outcome.stop_reason
    edge = analyze(outcome.trials, 0.1, None).memory
    assert (edge.largest_fit, edge.smallest_oom) == (400, 416)


def test_past_the_knee_the_search_jumps_to_the_predicted_edge() -> None:
    runner = FakeRunner(fits_up_to=400)  # knee 64; a straight memory line that meets free memory at 400
    outcome = run_search(SearchPlan(max_batch=4096), runner)
    assert runner.calls == [1, 2, 4, 8, 16, 32, 64, 128, 392, 408]  # 2% below and above the prediction
    edge = analyze(outcome.trials, 0.1, None).memory
    assert (edge.largest_fit, edge.smallest_oom) == (392, 408)
    assert analyze(outcome.trials, 0.1, None).knee.batch_size == 64


def test_search_stops_at_the_latency_budget() -> None:
    runner = FakeRunner(latency_s=lambda b: 0.004 * b)  # 32 -> 128 ms
    outcome = run_search(SearchPlan(latency_p50_budget_s=0.1), runner)
    assert runner.calls == [1, 2, 4, 8, 16, 32]
    assert "over the 100 ms budget at batch 32" in outcome.stop_reason
    assert analyze(outcome.trials, 0.1, 0.1).latency.largest_within == 16


def test_search_stops_at_the_size_limit() -> None:
    runner = FakeRunner()
    outcome = run_search(SearchPlan(start=8, max_batch=100), runner)
    assert runner.calls == [8, 16, 32, 64, 100]
    assert outcome.stop_reason == "reached the size limit (100)"


def test_a_sticky_cuda_error_stops_the_sweep_and_is_not_retried() -> None:
    runner = FakeRunner(failures={64: (records.CUDA_ERROR, "CUDA error: an illegal memory access was encountered")})
    outcome = run_search(SearchPlan(), runner)
    assert runner.calls == [1, 2, 4, 8, 16, 32, 64]
    assert outcome.failed
    assert "CUDA error at batch 64 (not retried)" in outcome.stop_reason


def test_a_crashed_trial_stops_the_sweep() -> None:
    runner = FakeRunner(failures={4: (records.CRASHED, "trial process killed by SIGSEGV")})
    outcome = run_search(SearchPlan(), runner)
    assert runner.calls == [1, 2, 4] and outcome.failed


def test_a_size_specific_error_does_not_stop_the_search() -> None:
    bn = "ValueError: Expected more than 1 value per channel when training"
    runner = FakeRunner(failures={1: (records.ERROR, bn)})
    outcome = run_search(SearchPlan(max_batch=8), runner)
    assert runner.calls == [1, 2, 4, 8]
    assert not outcome.failed


def test_the_same_error_twice_stops_the_search() -> None:
    runner = FakeRunner(failures=dict.fromkeys((1, 2, 4), (records.ERROR, "KeyError: 'x'")))
    outcome = run_search(SearchPlan(), runner)
    assert runner.calls == [1, 2]
    assert outcome.failed and "the same error at two sizes" in outcome.stop_reason


def test_explicit_sizes_skip_what_is_above_an_oom() -> None:
    runner = FakeRunner(fits_up_to=40)
    outcome = run_search(SearchPlan(batch_sizes=(64, 8, 16, 32, 128)), runner)
    assert runner.calls == [8, 16, 32, 64]
    statuses = [(t.batch_size, t.status) for t in outcome.trials]
    assert statuses == [(8, "ok"), (16, "ok"), (32, "ok"), (64, "oom"), (128, "skipped")]
    assert outcome.stop_reason == "out of memory at batch 64; larger sizes skipped"


def test_a_bad_target_ends_the_sweep_at_once() -> None:
    def runner(batch_size: int) -> TrialResult:
        result = failed(batch_size, records.BAD_TARGET, "build() returned int")
        result.error_code = "bad_data"
        return result

    with pytest.raises(TargetRejected, match="returned int"):
        run_search(SearchPlan(), runner)


def test_ctrl_c_keeps_what_was_measured() -> None:
    inner = FakeRunner()

    def runner(batch_size: int) -> TrialResult:
        if batch_size == 8:
            raise KeyboardInterrupt
        return inner(batch_size)

    outcome = run_search(SearchPlan(), runner)
    assert outcome.interrupted and [t.batch_size for t in outcome.trials] == [1, 2, 4]


# Issue 27, item 27: ResNet-50 training on an H200 (knee 256, memory edge 1664-1728) took
# 350 s. A synthetic model of that curve: throughput flat from 256 on, out of memory above 1700.
def resnet50_like_rate(batch_size: int) -> float:
    return 3000.0 * min(batch_size, 256) / 256


def test_bisection_past_the_knee_runs_fit_probes() -> None:
    runner, prober = FakeRunner(resnet50_like_rate, fits_up_to=1700), FakeRunner(resnet50_like_rate, fits_up_to=1700)
    outcome = run_search(SearchPlan(max_batch=4096, predict_edge=False), runner, probe_runner=prober)
    assert runner.calls == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]  # measured until the OOM
    assert prober.calls == [1536, 1792, 1664, 1728]  # past the knee: only whether each fits
    assert all(t.fit_probe for t in outcome.trials if t.batch_size in prober.calls)
    analysis = analyze(outcome.trials, headroom=0.1, latency_budget_s=None)
    assert analysis.knee.batch_size == 256  # the probes' few iterations do not move the knee
    assert (analysis.memory.largest_fit, analysis.memory.smallest_oom) == (1664, 1728)


def test_without_a_knee_below_the_edge_the_bisection_measures() -> None:
    runner, prober = FakeRunner(lambda b: 10.0 * b, fits_up_to=1700), FakeRunner(lambda b: 10.0 * b, fits_up_to=1700)
    outcome = run_search(SearchPlan(max_batch=4096), runner, probe_runner=prober)
    assert prober.calls == []  # throughput still climbing: the edge may be the recommendation
    assert runner.calls[12:] == [1664, 1744]  # after the OOM at 2048: just below the predicted edge, just above
    assert not any(t.fit_probe for t in outcome.trials)


def test_the_bisection_is_bounded() -> None:
    runner = FakeRunner(resnet50_like_rate, fits_up_to=1100)
    outcome = run_search(SearchPlan(max_batch=4096, max_edge_trials=2, predict_edge=False), runner)
    assert runner.calls[12:] == [1536, 1280]  # 1024 fit, 2048 did not; two sizes, then stop
    assert outcome.stop_reason.endswith("memory edge bisected to between 1024 and 1280 (at most 2 edge sizes)")


def test_a_fit_probe_is_a_fit_check_without_a_steady_window() -> None:
    """A size run only to learn whether it fits: the first step and two more, untimed; no
    warm-up until the steps stop getting faster, no steady window, and cuDNN autotuning
    off for the check only. The sizes timed in full keep the sweep's (and the target's)
    settings."""
    from gpudoctor.commands.sweep import FIT_CHECK_STEPS, probe_spec
    from gpudoctor.sweep.records import TrialSpec

    base = TrialSpec(target="m.py:build", mode="train", batch_size=1, max_time_s=10.0)
    probe = probe_spec(base)
    assert FIT_CHECK_STEPS == 3 and probe.fit_check_steps == FIT_CHECK_STEPS
    assert probe.fit_check_cudnn_benchmark is False
    assert base.fit_check_steps == 0 and base.fit_check_cudnn_benchmark is None  # timed: as the target sets it
    assert dataclasses.replace(probe, fit_check_steps=0, fit_check_cudnn_benchmark=None) == base
