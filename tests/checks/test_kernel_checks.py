"""GD301-GD304 (stage 3, kernels) on hand-built ProfileSummary sessions with known answers.

Each check: a positive case (with its severity, evidence and gain), a negative case
(pass), and the skipped cases: no profile at all, and a profile without GPU activity
(a CPU-only trace), which must never count as a pass.
"""

from __future__ import annotations

import pytest
from helpers import make_session, run_check
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.checks import gd301_launch_bound, gd302_host_sync, gd303_copies, gd304_fp32_matmul
from gpudoctor.model import Skip
from gpudoctor.session import KernelStat, ProfileSummary, SyncSite
from gpudoctor.verdict.registry import load_checks

CHECKS = [gd301_launch_bound.run.check, gd302_host_sync.run.check, gd303_copies.run.check, gd304_fp32_matmul.run.check]


def profile(**fields) -> ProfileSummary:
    """A GPU profile: 10 steps, 1000 kernels of 200 us (200 ms busy), no idle, unless told."""
    base = {
        "steps": 10,
        "window_s": 0.25,
        "kernel_count": 1000,
        "kernel_total_us": 200_000.0,
        "kernel_median_us": 200.0,
        "gpu_busy_us": 200_000.0,
        "gpu_idle_us": 0.0,
        "launch_count": 1000,
        "launch_total_us": 5_000.0,
    }
    base.update(fields)
    return ProfileSummary(**base)


def cpu_only() -> ProfileSummary:
    return ProfileSummary(window_s=0.1, error="no GPU activity in the trace: a CPU-only profile")


# ---- common to the four ------------------------------------------------------------------
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_metadata_and_documentation_page(check):
    assert check.stage == 3 and check.requires == ("profile",)
    assert check.doc.startswith(f"{check.id} {check.slug}:")
    for section in ("What it detects", "Why it matters", "How it is measured", "Thresholds", "What to do"):
        assert section in check.doc
    assert check.id in {c.id for c in load_checks()[0]}


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_skipped_without_a_profile(check):
    outcome, findings = run_check(check, make_session())
    assert outcome.status == "skipped" and not findings
    assert outcome.reason and outcome.reason.startswith("profile:")


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_skipped_not_passed_on_a_cpu_only_profile(check):
    outcome, findings = run_check(check, make_session(profile=cpu_only()))
    assert outcome.status == "skipped" and not findings
    assert "CPU-only" in (outcome.reason or "")


@settings(max_examples=80, deadline=None)
@given(kernels=st.integers(0, 5000), short=st.floats(0, 1), busy=st.floats(0, 1e6), idle=st.floats(0, 1e6),
       split=st.floats(0, 1), syncs=st.integers(0, 500), steps=st.integers(0, 50), copy_us=st.floats(0, 1e6),
       fp32=st.floats(0, 1), median=st.one_of(st.none(), st.floats(0.5, 1e4)))
def test_checks_never_crash_on_arbitrary_numbers(kernels, short, busy, idle, split, syncs, steps, copy_us, fp32,
                                                 median):
    p = profile(kernel_count=kernels, short_kernel_count=int(kernels * short), gpu_busy_us=busy, gpu_idle_us=idle,
                idle_gap_host_wait_us=idle * split, idle_gap_kernel_to_kernel_us=idle * (1 - split),
                idle_after_sync_us=idle * split / 2, sync_count=syncs, steps=steps, kernel_median_us=median,
                kernel_total_us=busy, matmul_total_us=busy * fp32, matmul_fp32_us=busy * fp32 * split,
                memcpy={"HtoD_pageable": {"count": 3, "bytes": 3e6, "us": copy_us, "small_count": 1}})
    for check in CHECKS:
        outcome, findings = run_check(check, make_session(profile=p))
        assert outcome.status in ("pass", "finding", "skipped"), outcome.reason
        for f in findings:
            assert f.estimated_gain is None or 1.0 <= f.estimated_gain <= 10.0 or check.id == "GD304"


# ---- GD301 launch-bound -------------------------------------------------------------------
def launch_bound(**fields) -> ProfileSummary:
    """1000 kernels of ~3 us, 80% shorter than their launch; GPU idle 60% of a 10 ms span."""
    base = {"kernel_count": 1000, "kernel_total_us": 4000.0, "kernel_median_us": 3.0, "short_kernel_count": 800,
            "gpu_busy_us": 4000.0, "gpu_idle_us": 6000.0, "idle_gap_kernel_to_kernel_us": 1000.0,
            "idle_gap_host_wait_us": 5000.0, "launch_count": 1000, "launch_total_us": 6000.0}
    base.update(fields)
    return profile(**base)


def test_gd301_many_tiny_kernels_and_an_idle_gpu_is_critical():
    outcome, (f,) = run_check(gd301_launch_bound.run.check, make_session(profile=launch_bound()))
    assert outcome.status == "finding" and f.id == "GD301" and f.severity == "critical"
    assert f.estimated_gain == pytest.approx(10_000 / 4_000)  # every launch-bound gap removed
    ev = f.evidence
    assert ev["short_kernel_share"].value == pytest.approx(80.0)
    assert ev["gpu_idle_share"].value == pytest.approx(60.0)
    assert ev["kernel_median"].value == pytest.approx(3.0)
    assert ev["launch_mean"].value == pytest.approx(6.0)
    assert ev["launches_per_step"].value == pytest.approx(100.0)
    assert "60%" in f.message and "80%" in f.message
    assert "torch.compile" in (f.remedy.code or "") and "reduce-overhead" in (f.remedy.code or "")


def test_gd301_recommends_only_what_its_number_prices():
    # its replay (scenario "launch") leaves optimizer.step() as measured: a fused optimizer buys none of
    # it, and advised under it the DDP tutorial's fused SGD read 2.44x and realized 1.31x. The
    # optimizer's launches are GD305's, with their own what-if
    _, (f,) = run_check(gd301_launch_bound.run.check, make_session(profile=launch_bound()))
    advice = f.remedy.text + (f.remedy.code or "")
    assert gd301_launch_bound.run.check.fix.scenarios == ("launch", "compiled")
    assert "fused=True" not in advice and "fused optimizer" not in advice.lower()
    assert "GD305" in f.remedy.text


def test_gd301_gaps_after_syncs_are_left_to_gd302():
    p = launch_bound(idle_after_sync_us=4000.0)  # 4 of the 5 ms of host waits follow a sync
    _, (f,) = run_check(gd301_launch_bound.run.check, make_session(profile=p))
    assert f.estimated_gain == pytest.approx(10_000 / (10_000 - 2_000))


def test_gd301_graded_by_its_predicted_gain():
    # 2.5 of 10 ms idle from launches: 10 / 7.5 = 1.33x, under the 1.43x (30% of the step) critical line
    p = launch_bound(gpu_busy_us=7500.0, gpu_idle_us=2500.0, idle_gap_host_wait_us=1500.0)
    _, (f,) = run_check(gd301_launch_bound.run.check, make_session(profile=p))
    assert f.estimated_gain == pytest.approx(10_000 / 7_500)
    assert f.severity == "warning"
    assert f.prediction is not None and f.prediction.method == "rule"  # no replay, no GPU samples


def test_gd301_passes_when_the_queue_stays_full_or_kernels_are_long():
    busy_gpu = launch_bound(gpu_busy_us=9500.0, gpu_idle_us=500.0, idle_gap_host_wait_us=0.0,
                            idle_gap_kernel_to_kernel_us=500.0)
    assert run_check(gd301_launch_bound.run.check, make_session(profile=busy_gpu))[0].status == "pass"
    long_kernels = launch_bound(kernel_median_us=400.0, short_kernel_count=0)  # idle, but not from launches
    assert run_check(gd301_launch_bound.run.check, make_session(profile=long_kernels))[0].status == "pass"


def test_gd301_skips_with_too_few_kernels():
    outcome, _ = run_check(gd301_launch_bound.run.check, make_session(profile=launch_bound(kernel_count=40)))
    assert outcome.status == "skipped" and "only 40 kernels" in (outcome.reason or "")


# ---- GD302 host-sync ----------------------------------------------------------------------
def syncing(**fields) -> ProfileSummary:
    """3 syncs per step over 10 steps; after them the GPU idles 3.5 of its 10 ms."""
    sites = [SyncSite("aten::item", 20, 400.0, "train_step (train.py:40) -> Tensor.item"),
             SyncSite("cudaDeviceSynchronize", 10, 100.0, "train_step (train.py:40) -> torch.cuda.synchronize")]
    base = {"gpu_busy_us": 6000.0, "gpu_idle_us": 4000.0, "idle_gap_host_wait_us": 4000.0, "idle_after_sync_us": 3500.0,
            "sync_count": 30, "sync_total_us": 500.0, "sync_sites": sites}
    base.update(fields)
    return profile(**base)


def test_gd302_syncs_that_empty_the_queue_are_critical_with_their_sites():
    outcome, (f,) = run_check(gd302_host_sync.run.check, make_session(profile=syncing()))
    assert outcome.status == "finding" and f.severity == "critical"  # 35% >= 30%
    assert f.estimated_gain == pytest.approx(10_000 / 6_500)
    assert f.evidence["syncs_per_step"].value == pytest.approx(3.0)
    assert f.evidence["idle_after_sync_share"].value == pytest.approx(35.0)
    assert f.evidence["site_1"].value == "aten::item in train_step (train.py:40) -> Tensor.item (20x, 400 us blocked)"
    assert "train.py:40" in f.message and "3.0 per step" in f.message
    assert "set_sync_debug_mode" in (f.remedy.code or "")


@pytest.mark.parametrize("idle_after, steps, syncs, expected", [
    (1500.0, 10, 30, "warning"),  # 15% of the span
    (200.0, 10, 30, "info"),  # frequent but cheap
    (200.0, 0, 30, "info"),  # steps unknown: 30 in the window is frequent
    (1500.0, 10, 5, "warning"),  # rare, but each one costs
])
def test_gd302_severity(idle_after, steps, syncs, expected):
    p = syncing(idle_after_sync_us=idle_after, steps=steps, sync_count=syncs)
    _, (f,) = run_check(gd302_host_sync.run.check, make_session(profile=p))
    assert f.severity == expected


def test_gd302_passes_on_one_cheap_sync_per_step_or_none():
    one_per_step = syncing(sync_count=10, idle_after_sync_us=100.0)
    assert run_check(gd302_host_sync.run.check, make_session(profile=one_per_step))[0].status == "pass"
    assert run_check(gd302_host_sync.run.check, make_session(profile=profile()))[0].status == "pass"


# ---- GD303 copy-bound -----------------------------------------------------------------------
def copying(**fields) -> ProfileSummary:
    memcpy = {"HtoD_pageable": {"count": 10, "bytes": 1.2e9, "us": 120_000.0, "small_count": 0},
              "DtoH_pinned": {"count": 10, "bytes": 40.0, "us": 20.0, "small_count": 10}}
    base = {"kernel_total_us": 80_000.0, "gpu_busy_us": 200_000.0, "memcpy": memcpy}
    base.update(fields)
    return profile(**base)


def test_gd303_copies_dominating_the_gpu_are_critical_with_bandwidth():
    outcome, (f,) = run_check(gd303_copies.run.check, make_session(profile=copying()))
    assert outcome.status == "finding" and f.severity == "critical"
    assert f.evidence["copy_share"].value == pytest.approx(60.0, abs=0.1)
    assert f.evidence["HtoD_pageable_bandwidth"].value == pytest.approx(10.0)  # 1.2 GB in 120 ms
    assert f.evidence["copy_bytes"].value == 1_200_000_040
    assert "HtoD_pageable" in f.message and "pin" in f.message
    assert f.estimated_gain == pytest.approx(200_000 / (200_000 - 120_020))
    assert "non_blocking=True" in (f.remedy.code or "")


def test_gd303_many_small_copies_per_step_are_reported():
    memcpy = {"HtoD_pinned": {"count": 500, "bytes": 500 * 400, "us": 1000.0, "small_count": 500}}
    _, (f,) = run_check(gd303_copies.run.check, make_session(profile=copying(memcpy=memcpy)))
    assert f.severity == "info" and "small" in f.title
    assert f.evidence["small_copies_per_step"].value == pytest.approx(50.0)


def test_gd303_passes_on_few_cheap_copies_and_on_none():
    memcpy = {"HtoD_pinned": {"count": 10, "bytes": 1e8, "us": 2000.0, "small_count": 0}}
    assert run_check(gd303_copies.run.check, make_session(profile=copying(memcpy=memcpy)))[0].status == "pass"
    assert run_check(gd303_copies.run.check, make_session(profile=profile()))[0].status == "pass"


# ---- GD304 fp32-matmul ----------------------------------------------------------------------
def fp32(**fields) -> ProfileSummary:
    top = [KernelStat("ampere_sgemm_128x64_nn", 100, 160_000.0, 1600.0, 1700.0)]
    base = {"matmul_fp32_us": 160_000.0, "matmul_total_us": 160_000.0, "tf32_enabled": False, "top_kernels": top}
    base.update(fields)
    return profile(**base)


def test_gd304_fp32_matmuls_filling_the_gpu_are_critical():
    outcome, (f,) = run_check(gd304_fp32_matmul.run.check, make_session(profile=fp32()))
    assert outcome.status == "finding" and f.severity == "critical"  # 80% of the span
    assert f.estimated_gain == pytest.approx(1 / (0.2 + 0.8 / 8))
    assert f.evidence["fp32_matmul_share"].value == pytest.approx(80.0)
    assert f.evidence["tf32_enabled"].value is False
    assert "TF32 is disabled" in f.message and "ampere_sgemm" in f.message
    assert "set_float32_matmul_precision(\"high\")" in (f.remedy.code or "")
    assert "torch.autocast" in (f.remedy.code or "")


def test_gd304_is_only_info_when_the_gpu_mostly_waits():
    p = fp32(gpu_busy_us=200_000.0, gpu_idle_us=1_800_000.0, tf32_enabled=None)  # 8% of a 2 s span
    _, (f,) = run_check(gd304_fp32_matmul.run.check, make_session(profile=p))
    assert f.severity == "info" and f.estimated_gain < 1.1
    assert "not recorded" in f.message


def test_gd304_says_so_when_tf32_is_on_but_kernels_are_fp32():
    _, (f,) = run_check(gd304_fp32_matmul.run.check, make_session(profile=fp32(tf32_enabled=True)))
    assert "predate Ampere" in f.message


def test_gd304_passes_on_tensor_core_matmuls_and_skips_without_matmuls():
    tc = profile(matmul_fp32_us=0.0, matmul_tensor_core_us=150_000.0, matmul_total_us=150_000.0)
    assert run_check(gd304_fp32_matmul.run.check, make_session(profile=tc))[0].status == "pass"
    small = fp32(matmul_fp32_us=10_000.0, matmul_total_us=150_000.0)  # 5% of kernel time
    assert run_check(gd304_fp32_matmul.run.check, make_session(profile=small))[0].status == "pass"
    outcome, _ = run_check(gd304_fp32_matmul.run.check, make_session(profile=profile()))
    assert outcome.status == "skipped" and "no matrix-multiply" in (outcome.reason or "")


def test_skip_helper_is_the_same_everywhere():
    for module in (gd301_launch_bound, gd302_host_sync, gd303_copies, gd304_fp32_matmul):
        with pytest.raises(Skip, match="CPU-only"):
            module.gpu_profile(make_session(profile=cpu_only()))


def test_gd303_copy_time_equal_to_the_whole_span_gives_no_gain_and_no_crash():
    # span * 0.999 rounds back to span for a subnormal span: the gain's denominator was 0
    memcpy = {"HtoD_pageable": {"count": 1, "bytes": 8.0, "us": 1.0, "small_count": 1}}
    tiny = copying(memcpy=memcpy, gpu_busy_us=5e-324, gpu_idle_us=0.0, kernel_total_us=0.0)
    findings = gd303_copies.run(make_session(profile=tiny))
    assert [f.estimated_gain for f in findings] == [None]
