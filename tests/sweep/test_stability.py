"""The stability rule: when a timed loop may stop, and whether it was stable."""

from __future__ import annotations

import pytest

from gpudoctor.sweep.stability import StabilityRule, drift, judge, median_ci, rel_ci_half_width

RULE = StabilityRule(min_iters=20, min_time_s=1.0, max_time_s=10.0)


def test_steady_iterations_are_stable_once_the_minimums_are_met() -> None:
    # 19 iterations within +/-3%: one short (only steps within +/-2.5% may stop at half the count)
    assert not judge([0.097, 0.103] * 9 + [0.1], 1.9, RULE).done
    assert not judge([0.01] * 50, 0.5, RULE).done  # 0.5 s measured: too short
    verdict = judge([0.1] * 20, 2.0, RULE)
    assert verdict.done and verdict.stable
    assert verdict.rel_ci_half_width == 0.0 and verdict.drift == 0.0


def test_noisy_iterations_continue_then_stop_unstable_at_the_cap() -> None:
    noisy = [0.05, 0.15] * 20  # the median's CI spans the whole spread
    assert not judge(noisy, 4.0, RULE).done
    verdict = judge(noisy, 10.0, RULE)
    assert verdict.done and not verdict.stable
    assert "median CI not below 5%" in verdict.reason


def test_drift_blocks_stability() -> None:
    warming = [0.12] * 20 + [0.10] * 20  # clocks still settling in the first half
    assert drift(warming) > 0.05
    verdict = judge(warming, 4.0, RULE)
    assert not verdict.done and not verdict.stable


def test_median_ci_uses_order_statistics() -> None:
    values = list(range(1, 21))  # n=20: ranks 5 and 16
    assert median_ci(values) == (5, 16)
    assert median_ci([1.0] * 5) is None
    assert rel_ci_half_width([2.0] * 10) == 0.0


def test_slow_iterations_need_three_before_the_cap_ends_them() -> None:
    assert not judge([4.0, 4.0], 12.0, RULE).done
    verdict = judge([4.0, 4.0, 4.0], 12.0, RULE)
    assert verdict.done and not verdict.stable


def test_a_heavy_tail_is_not_stable() -> None:
    """Issue 27, item 24: a batch-1 point whose p90 was 150x its p50 was labelled stable:
    its median was precise and steady, its tail not."""
    spiky = ([0.001] * 8 + [0.150] * 2) * 4  # p90 = 150 x p50
    verdict = judge(spiky, 2.0, StabilityRule(min_iters=20, min_time_s=0.01, max_time_s=10.0))
    assert verdict.done and not verdict.stable  # more of the same would not thin the tail: stop now
    assert verdict.tail_ratio == 150.0
    assert "p90 is 150x the median" in verdict.reason
    mild = ([0.001] * 9 + [0.0015]) * 4
    assert judge(mild, 2.0, StabilityRule(min_iters=20, min_time_s=0.01)).stable


def test_long_steady_steps_stop_after_half_the_iterations() -> None:
    """Issue 27, item 27: at large sizes a step is long and its time stable; 10 such steps
    are a measurement, 20 only repeat it."""
    long_steady = [0.200, 0.201, 0.199, 0.2005, 0.1995] * 2  # 10 steps, 2 s, within +/-0.5%
    verdict = judge(long_steady, 2.1, RULE)
    assert verdict.done and verdict.stable
    short_steady = [0.001, 0.00101, 0.00099, 0.001005, 0.000995] * 2  # as steady, but 10 ms measured
    assert not judge(short_steady, 0.02, RULE).done
    long_noisy = [0.200, 0.212, 0.190, 0.205, 0.195] * 2  # +/-5%: not tight enough to stop early
    assert not judge(long_noisy, 2.1, RULE).done


def test_tight_steps_stop_at_eight_and_loose_ones_keep_the_window() -> None:
    """Issue 27, item 27: shorter windows where the step time is stable (SYNTHETIC step times)."""
    tight = [0.300, 0.301, 0.299, 0.3005, 0.2995, 0.3, 0.302, 0.298]  # 8 steps within +/-0.7%, 2.4 s
    verdict = judge(tight, 2.5, RULE)
    assert verdict.done and verdict.stable and "tight: stopped early" in verdict.reason
    assert not judge(tight[:7], 2.2, RULE).done  # fewer than 8: not yet
    loose = [0.300, 0.312, 0.290, 0.305, 0.295, 0.3, 0.31, 0.29]  # +/-4%: stable enough for 20, not for 8
    assert not judge(loose, 2.5, RULE).done
    assert judge(loose * 3, 7.5, RULE).done  # ... the full window: 20 iterations
    creeping = [0.30, 0.30, 0.30, 0.30, 0.307, 0.307, 0.307, 0.307]  # halves 2.3% apart, all within +/-1.2%
    assert judge(creeping, 2.5, RULE).done
    drifting = [0.30, 0.30, 0.30, 0.30, 0.31, 0.31, 0.31, 0.31]  # halves 3.3% apart
    assert not judge(drifting, 2.5, RULE).done


def test_warm_up_ends_when_the_step_times_stop_falling(monkeypatch: pytest.MonkeyPatch) -> None:
    """SYNTHETIC step times: an autotuning first step, then two more settling, then flat."""
    from gpudoctor.sweep.measure import WarmupRule, warm_up

    class FakeTimer:
        name = "fake"

        def sync(self) -> None:
            pass

        def time_chunk(self, step: object, chunk_s: float, max_iters: int) -> list[float]:
            raise AssertionError("not used by the warm-up")

    clock = {"now": 0.0}
    times = iter([10.0, 0.5, 0.35, 0.30, 0.30, 0.30, 0.30])

    def step() -> None:
        clock["now"] += next(times)

    import gpudoctor.sweep.measure as measure

    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock["now"])
    warmup = warm_up(step, FakeTimer(), WarmupRule(min_iters=2, min_s=0.2, max_s=120.0))
    assert warmup.iterations == 5  # 0.30 beat 0.35 by 14%: one more; 0.30 again: settled
    assert warmup.last_step_s == pytest.approx(0.30) and warmup.reason.startswith("settled")
    times = iter([1.0, 0.5, 0.25, 0.125, 0.0625])  # still halving at the cap
    capped = warm_up(step, FakeTimer(), WarmupRule(min_iters=2, min_s=0.2, max_s=1.8))
    assert capped.iterations == 4 and capped.reason.startswith("capped at 1.8 s")
