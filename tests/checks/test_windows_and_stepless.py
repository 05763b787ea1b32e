"""Kernel checks in windows without steps (per-second numbers) and across several windows."""

from __future__ import annotations

from helpers import make_session, run_check

from gpudoctor.checks import gd301_launch_bound, gd302_host_sync, gd303_copies
from gpudoctor.session import ProfileSummary, SyncSite


def stepless(**fields) -> ProfileSummary:
    """A 2-second time-bounded window (no steps) of a module-less loop: what the agent records."""
    base = {"steps": 0, "window_s": 2.0, "kernel_count": 500, "kernel_total_us": 2000.0, "kernel_median_us": 3.0,
            "gpu_busy_us": 40_000.0, "gpu_idle_us": 160_000.0, "launch_count": 500, "launch_total_us": 3000.0,
            "label": "start", "index": 1, "step_source": "time", "phase": "no step boundaries (time-bounded)",
            "window_start_s": 3.1, "window_end_s": 5.1}
    base.update(fields)
    return ProfileSummary(**base)


def small_copies_window() -> ProfileSummary:
    # 400 small pageable copies per iteration, 12 iterations in the window
    memcpy = {"HtoD_pageable": {"count": 4800, "bytes": 4800 * 256, "us": 9_600.0, "small_count": 4800}}
    return stepless(memcpy=memcpy, sync_count=4800, sync_total_us=60_000.0, idle_after_sync_us=100_000.0,
                    idle_gap_host_wait_us=150_000.0)


def test_gd303_fires_on_many_small_copies_without_steps_per_second():
    outcome, (f,) = run_check(gd303_copies.run.check, make_session(profile=small_copies_window()))
    assert outcome.status == "finding"
    assert f.evidence["small_copies"].value == 4800
    assert f.evidence["small_copies_per_second"].value == 2400
    assert "small_copies_per_step" not in f.evidence
    assert f.window is not None and "no step boundaries" in f.window and "3.1-5.1 s" in f.window


def test_gd302_gives_syncs_per_second_without_steps():
    outcome, (f,) = run_check(gd302_host_sync.run.check, make_session(profile=small_copies_window()))
    assert outcome.status == "finding" and f.severity == "critical"
    assert f.evidence["syncs_per_second"].value == 2400.0
    assert "2,400 per second" in f.message and "syncs_per_step" not in f.evidence


def test_gd301_gives_launches_per_second_without_steps():
    p = stepless(short_kernel_count=400, idle_gap_host_wait_us=150_000.0, idle_gap_kernel_to_kernel_us=5_000.0)
    outcome, (f,) = run_check(gd301_launch_bound.run.check, make_session(profile=p))
    assert outcome.status == "finding"
    assert f.evidence["launches_per_second"].value == 250
    assert "250 launches per second" in f.message


def syncing_window(index: int, label: str, syncs: int, idle_after: float, phase: str) -> ProfileSummary:
    sites = [SyncSite("aten::item", syncs, 50.0 * syncs, "evaluate (train.py:60) -> Tensor.item")] if syncs else []
    return ProfileSummary(steps=10, window_s=0.5, kernel_count=1000, kernel_total_us=6000.0, kernel_median_us=6.0,
                          gpu_busy_us=6000.0, gpu_idle_us=4000.0, idle_gap_host_wait_us=4000.0,
                          idle_after_sync_us=idle_after, sync_count=syncs, sync_total_us=50.0 * syncs,
                          sync_sites=sites, launch_count=1000, launch_total_us=5000.0, label=label, index=index,
                          step_source="optimizer" if index == 1 else "loader", phase=phase,
                          window_start_s=5.0 * index, window_end_s=5.0 * index + 0.5)


def test_a_finding_that_holds_in_one_phase_only_says_so():
    train = syncing_window(1, "start", 0, 0.0, "optimizer steps, with gradients")
    evaluation = syncing_window(2, "phase", 30, 3500.0, "DataLoader batches, without gradients")
    session = make_session(profile=train, profiles=[train, evaluation])
    outcome, (f,) = run_check(gd302_host_sync.run.check, session)
    assert outcome.status == "finding"
    assert f.window is not None and f.window.startswith("profiled window 2 (phase, 10 steps)")
    assert "only in window 2 (phase: DataLoader batches, without gradients)" in f.message
    assert "not in window 1 (start" in f.message
    assert f.evidence["sync_count"].window == "profiled window 2 (phase, 10 steps)"


def test_a_finding_of_the_primary_window_says_where_else_it_holds():
    first = syncing_window(1, "start", 30, 3500.0, "optimizer steps")
    later = syncing_window(2, "later", 30, 3000.0, "optimizer steps")
    _, (f,) = run_check(gd302_host_sync.run.check, make_session(profile=first, profiles=[first, later]))
    assert f.window is not None and f.window.startswith("profiled window 1 (start")
    assert "holds in every profiled window" in f.message


def test_windows_without_gpu_work_are_skipped_not_passed():
    cpu = ProfileSummary(window_s=0.2, error="no GPU activity in the trace: a CPU-only profile", index=1,
                         label="start")
    also_cpu = ProfileSummary(window_s=0.2, error="no GPU activity in the trace: a CPU-only profile", index=2,
                              label="phase")
    outcome, findings = run_check(gd302_host_sync.run.check, make_session(profile=cpu, profiles=[cpu, also_cpu]))
    assert outcome.status == "skipped" and not findings and "CPU-only" in (outcome.reason or "")
