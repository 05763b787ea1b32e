"""Knee, memory edge, latency limit and power on synthetic curves with known answers."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from gpudoctor.sweep import records
from gpudoctor.sweep.analysis import (
    analyze,
    find_knee,
    latency_limit,
    linear_fit,
    memory_edge,
    power_points,
)
from gpudoctor.sweep.recommend import observations, offline, online

from .fakes import GB, failed, point, saturating

POWERS = [2**i for i in range(11)]  # 1 .. 1024


def test_knee_of_a_curve_that_saturates_at_64() -> None:
    knee = find_knee([(b, saturating(b)) for b in POWERS], "samples_per_s")
    assert knee.batch_size == 64
    assert knee.fraction_of_peak == 1.0
    assert "batch 64" in knee.reason


def test_knee_survives_measurement_noise() -> None:
    noise = [1.02, 0.99, 1.01, 0.98, 1.02, 0.99, 1.01, 1.0, 0.98, 1.02, 0.99]
    knee = find_knee([(b, saturating(b) * n) for b, n in zip(POWERS, noise)], "samples_per_s")
    assert knee.batch_size == 64


def test_knee_of_a_smooth_curve_is_where_growth_falls_below_5_percent_per_doubling() -> None:
    # T = b / (b + 16): +5.9% from 128 to 256, +3.1% from 256 to 512
    knee = find_knee([(b, b / (b + 16)) for b in POWERS], "samples_per_s")
    assert knee.batch_size == 256
    assert 0.94 < knee.fraction_of_peak < 0.96


def test_no_knee_while_the_curve_still_climbs() -> None:
    knee = find_knee([(b, 10.0 * b) for b in (1, 2, 4, 8)], "samples_per_s")
    assert knee.batch_size is None
    assert knee.reason.startswith("not reached")
    assert math.isclose(knee.growth_per_doubling_after, 1.0)


def test_bisection_points_close_together_do_not_make_noise_a_knee() -> None:
    # 384 is 0.58 doublings above 256: its +3% counts as one doubling, within 5%
    points = [(64, 500.0), (128, 800.0), (256, 1000.0), (384, 1030.0), (512, 1020.0)]
    assert find_knee(points, "samples_per_s").batch_size == 256


def test_a_flat_spot_followed_by_growth_is_not_the_knee() -> None:
    points = [(8, 100.0), (16, 101.0), (32, 200.0), (64, 205.0), (128, 206.0)]
    assert find_knee(points, "samples_per_s").batch_size == 32


def test_knee_needs_two_sizes() -> None:
    assert find_knee([(8, 100.0)], "samples_per_s").batch_size is None
    assert find_knee([], "samples_per_s").reason == "no size was measured"


@given(st.floats(min_value=1e-3, max_value=1e6), st.integers(min_value=2, max_value=512))
def test_knee_does_not_depend_on_units(scale: float, saturation: int) -> None:
    curve = [(b, saturating(b, at=saturation)) for b in POWERS]
    scaled = [(b, v * scale) for b, v in curve]
    assert find_knee(curve, "x").batch_size == find_knee(scaled, "x").batch_size


def test_memory_edge_bisected_between_256_and_512() -> None:
    # powers of two up to an OOM at 512, then bisection: 384 fits, 448 and 416 do not, 400 fits
    trials = [point(b, saturating(b), peak=int(GB + 0.2 * GB * b), capacity=100 * GB) for b in (64, 128, 256, 384, 400)]
    trials += [failed(512, records.OOM), failed(448, records.OOM), failed(416, records.OOM)]
    edge = memory_edge(trials, headroom=0.1)
    assert edge.found and (edge.largest_fit, edge.smallest_oom) == (400, 416)
    assert edge.largest_fit_with_headroom == 400  # 81 GB <= 90 GB
    assert math.isclose(edge.per_sample_bytes, 0.2 * GB, rel_tol=1e-6)
    assert edge.estimated_max_batch_with_headroom == 415  # (90 - 1) / 0.2 = 445, capped below the OOM


def test_headroom_excludes_sizes_too_close_to_capacity() -> None:
    trials = [point(b, 100.0, peak=int(b * GB), capacity=100 * GB) for b in (16, 32, 64, 95)]
    edge = memory_edge(trials, headroom=0.1)
    assert not edge.found and edge.smallest_oom is None
    assert edge.largest_fit == 95
    assert edge.largest_fit_with_headroom == 64
    assert "no out-of-memory up to batch 95" in edge.reason


def test_noisy_memory_gives_no_per_sample_estimate() -> None:
    trials = [point(b, 100.0, peak=p, capacity=100 * GB) for b, p in ((1, 500), (2, 400), (4, 520), (8, 450))]
    edge = memory_edge(trials, headroom=0.1)
    assert edge.per_sample_bytes is None and edge.estimated_max_batch_with_headroom is None


def test_nothing_fits_when_the_first_size_runs_out_of_memory() -> None:
    edge = memory_edge([failed(1, records.OOM)], headroom=0.1)
    assert edge.largest_fit is None and edge.smallest_oom == 1
    assert "nothing measured fits" in edge.reason


def test_latency_budget_crossed_at_32() -> None:
    trials = [point(b, 100.0 * b, p50_s=0.005 * b) for b in (1, 2, 4, 8, 16, 32)]  # 32 -> 160 ms
    limit = latency_limit(trials, budget_s=0.1)
    assert (limit.largest_within, limit.smallest_over) == (16, 32)
    assert math.isclose(limit.p50_at_largest_within_s, 0.08)


def test_power_verdicts() -> None:
    trials = [point(b, 100.0, sm=50.0, power=w, limit=700.0) for b, w in ((8, 350.0), (16, 595.0), (32, 665.0))]
    verdicts = {p.batch_size: p.verdict for p in power_points(trials)}
    assert verdicts == {8: "headroom", 16: "near_full", 32: "at_limit"}
    assert any("at the cap" in note for note in observations(analyze(trials, 0.1, None)))


def test_linear_fit() -> None:
    slope, intercept, r2 = linear_fit([1.0, 2.0, 3.0], [3.0, 5.0, 7.0])
    assert (slope, intercept, r2) == (2.0, 1.0, 1.0)
    assert linear_fit([1.0, 1.0], [2.0, 3.0]) is None


def test_offline_picks_the_knee_and_online_the_latency_cap() -> None:
    trials = [
        point(b, saturating(b), p50_s=0.002 * b, peak=int(GB + 0.1 * GB * b), capacity=100 * GB) for b in POWERS[:9]
    ]
    analysis = analyze(trials, headroom=0.1, latency_budget_s=0.05)  # 16 -> 32 ms, 32 -> 64 ms
    assert offline(trials, analysis, "infer").batch_size == 64
    rec = online(trials, analysis, "infer")
    assert rec.batch_size == 16
    delay = rec.settings["triton"]["max_queue_delay_microseconds"]
    assert delay == 9000  # half of (50 ms - 32 ms)
    assert "max_batch_size: 16" in rec.code and "--max-num-seqs 16" in rec.code


def test_online_without_budget_uses_the_knee_and_a_50us_start() -> None:
    trials = [point(b, saturating(b), peak=int(GB), capacity=100 * GB) for b in POWERS[:9]]
    rec = online(trials, analyze(trials, 0.1, None), "infer")
    assert rec.batch_size == 64
    assert rec.settings["triton"]["max_queue_delay_microseconds"] == 50


def test_training_has_no_online_advice_and_mentions_the_learning_rate() -> None:
    trials = [point(b, saturating(b)) for b in POWERS[:8]]
    analysis = analyze(trials, 0.1, None)
    assert online(trials, analysis, "train").batch_size is None
    assert any("learning rate" in a for a in offline(trials, analysis, "train").assumptions)


def test_no_size_meets_the_budget() -> None:
    trials = [point(b, 10.0 * b, p50_s=0.2 * b) for b in (1, 2)]
    rec = online(trials, analyze(trials, 0.1, 0.1), "infer")
    assert rec.batch_size is None and "too slow" in rec.text


def test_online_cap_stops_at_the_knee_when_the_budget_allows_more() -> None:
    trials = [point(b, saturating(b), p50_s=0.0001 * b, peak=int(GB), capacity=100 * GB) for b in POWERS[:9]]
    rec = online(trials, analyze(trials, 0.1, latency_budget_s=0.05), "infer")
    assert rec.batch_size == 64 and "would allow up to 256" in rec.text
    # half the slack (21.8 ms) would exceed one full batch's run (6.4 ms): capped there
    assert rec.settings["triton"]["max_queue_delay_microseconds"] == 6400
