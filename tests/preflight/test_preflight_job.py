"""PF9xx: policy thresholds judged on a diagnose report; unmeasured numbers are not-checked."""

from __future__ import annotations

from typing import Any

from gpudoctor.preflight import job
from gpudoctor.preflight.job import JobRun
from gpudoctor.preflight.policy import Policy


def report(**summary: Any) -> dict[str, Any]:
    base = {"steps": 40, "steady_steps": 25, "step_time_median_s": 0.2, "steps_per_s": 5.0, "samples_per_s": 160.0,
            "data_wait_share": 0.02, "gpu_util_mean": 97.0, "sm_activity_mean": 80.0,
            "peak_memory_allocated_bytes": 50 * 2**30}
    base.update(summary)
    return {"summary": base, "stop_reason": "steps", "exit_code": 130, "duration_s": 12.0, "findings": [],
            "checks": [{"id": "GD102", "status": "pass"}, {"id": "GD304", "status": "skipped"}],
            "environment": {"gpus": [{"memory_total_bytes": 100 * 2**30}]},
            "evidence": {"unavailable": {"gpm": "GPM unsupported on NVIDIA A10 (needs Hopper or newer)"}}}


STRICT = Policy(min_sm_activity=50, min_gpu_utilization=90, max_data_wait_share=0.05, no_critical_findings=True,
                min_samples_per_s=100, min_steps_per_s=2, max_step_time_ms=250, max_peak_memory_share=0.9)


def by_id(results):
    return {r.id: r for r in results}


def test_every_threshold_is_an_item_and_passes_on_a_good_run() -> None:
    results = by_id(job.items(STRICT, JobRun(report(), exit_code=0)))
    assert list(results) == ["PF901", "PF902", "PF903", "PF904", "PF905", "PF906", "PF907", "PF908", "PF909"]
    assert {r.status for r in results.values()} == {"pass"}, {i: r.found for i, r in results.items()}
    assert results["PF901"].found == "stopped by gpudoctor after --steps (12.0 s, 40 steps)"
    assert results["PF909"].found == "50.0% (torch.cuda.max_memory_allocated): 50.0 GiB of 100.0 GiB"


def test_thresholds_fail() -> None:
    bad = report(
        sm_activity_mean=9.0, data_wait_share=0.6, step_time_median_s=0.9, peak_memory_allocated_bytes=95 * 2**30
    )
    bad["findings"] = [{"id": "GD102", "severity": "critical", "title": "Input pipeline stall"}]
    results = by_id(job.items(STRICT, JobRun(bad, exit_code=0)))
    failed = sorted(i for i, r in results.items() if r.status == "fail")
    assert failed == ["PF902", "PF904", "PF905", "PF908", "PF909"]
    assert results["PF904"].found == "60.0% (25 steady steps)"
    assert results["PF905"].found == "1 critical: GD102 Input pipeline stall"


def test_unmeasured_numbers_are_not_checked_with_the_reason() -> None:
    empty = report(sm_activity_mean=None, samples_per_s=None, data_wait_share=None, peak_memory_allocated_bytes=None)
    results = by_id(job.items(STRICT, JobRun(empty, exit_code=0)))
    assert results["PF902"].status == "not-checked" and "GPM unsupported" in results["PF902"].reason
    assert results["PF906"].reason == "the batch size is unknown (no DataLoader seen)"
    assert "no DataLoader seen" in results["PF904"].reason
    assert "no CUDA allocator statistics" in results["PF909"].reason


def test_a_crashed_job_fails_pf901() -> None:
    crashed = report()
    crashed["findings"] = [{"id": "GD001", "severity": "critical", "title": "The run crashed: RuntimeError"}]
    result = job.items(Policy(), JobRun(crashed, exit_code=1))[0]
    assert result.status == "fail" and result.found.endswith("The run crashed: RuntimeError")


def test_a_crashed_job_quotes_the_finding_of_a_check_declared_run_failure() -> None:
    """Which finding says why is the checks' declaration (Check.run_failure), not an ID in preflight."""
    from gpudoctor.verdict.registry import checks_by_id

    declared = sorted(c.id for c in checks_by_id().values() if c.run_failure)
    assert declared == ["GD001"]
    crashed = report()
    crashed["findings"] = [{"id": "GD102", "severity": "critical", "title": "Input pipeline stall"},
                           {"id": "GD001", "severity": "critical", "title": "The run crashed: RuntimeError"}]
    result = job.items(Policy(), JobRun(crashed, exit_code=1))[0]
    assert result.found.endswith(": The run crashed: RuntimeError")


def test_thresholds_without_a_job_are_not_checked() -> None:
    results = job.items(Policy(min_sm_activity=40, no_critical_findings=True), None)
    assert [(r.id, r.status) for r in results] == [("PF902", "not-checked"), ("PF905", "not-checked")]
    assert "no job was run" in results[0].reason
    assert job.items(Policy(), None) == []
