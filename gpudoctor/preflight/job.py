"""PF9xx: the job, run bounded under `diagnose`, judged against the policy's thresholds.

Each threshold the policy sets becomes one item; a threshold whose number the run
did not measure (no GPM on this GPU, no DataLoader, too few steps) is not-checked
with the reason, and a threshold set while no job was run says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.metrics import format_bytes
from gpudoctor.preflight.model import FAIL, PASS, ItemResult, not_checked
from gpudoctor.preflight.policy import Policy

NO_JOB = "no job was run (give the command after --: gpudoctor preflight -- python train.py)"
STOPPED_BY_US = ("steps", "duration")


@dataclass(frozen=True)
class JobRun:
    report: Mapping[str, Any]  # the diagnose report (schema gpudoctor.report/1)
    exit_code: int  # diagnose's: the workload's, 0 when --steps/--duration stopped it
    files: dict[str, str] = field(default_factory=dict)  # kind -> path of the job's report files


def items(policy: Policy, job: JobRun | None) -> list[ItemResult]:
    out = [] if job is None else [_exit(job)]
    for key, item_id, judge in THRESHOLDS:
        wanted = getattr(policy, key)
        if wanted in (None, False):
            continue
        if job is None:
            out.append(not_checked(item_id, NO_JOB, _expected(key, wanted)))
        else:
            out.append(judge(item_id, key, wanted, job.report))
    return out


def _exit(job: JobRun) -> ItemResult:
    report = job.report
    steps = (report.get("summary") or {}).get("steps")
    stop = report.get("stop_reason")
    ran = f"{report.get('duration_s', 0):.1f} s, {steps or 0} steps"
    values = {"exit_code": job.exit_code, "workload_exit_code": report.get("exit_code"), "stop_reason": stop,
              "steps": steps, "report_files": dict(job.files)}
    if job.exit_code == 0:
        how = f"stopped by gpudoctor after --{stop}" if stop in STOPPED_BY_US else "exited with code 0"
        return ItemResult(
            "PF901", PASS, f"{how} ({ran})", "exit code 0 (or stopped by --steps/--duration)", values=values
        )
    failure = _run_failure_checks()
    crash = next((f for f in report.get("findings") or [] if f.get("id") in failure), None)
    why = f": {crash.get('title')}" if crash else ""
    return ItemResult("PF901", FAIL, f"exit code {job.exit_code} ({ran}){why}", "exit code 0", values=values)


def _run_failure_checks() -> set[str]:
    """The IDs of the checks whose findings are the run's failure itself (Check.run_failure)."""
    from gpudoctor.verdict.registry import checks_by_id

    return {c.id for c in checks_by_id().values() if c.run_failure}


def _expected(key: str, wanted: Any) -> str:
    if key == "no_critical_findings":
        return "no critical finding"
    unit = UNITS[key]
    bound = "at least" if key.startswith("min_") else "at most"
    return f"{bound} {_show(wanted, unit)} (policy {key})"


def _show(value: Any, unit: str) -> str:
    if unit == "%":
        return f"{value:.1f}%"
    if unit == "share":
        return f"{value:.1%}"
    if unit == "ms":
        return f"{value:,.1f} ms"
    return f"{value:,.3g} {unit}"


UNITS = {"min_sm_activity": "%", "min_gpu_utilization": "%", "max_data_wait_share": "share",
         "min_samples_per_s": "samples/s", "min_steps_per_s": "steps/s", "max_step_time_ms": "ms",
         "max_peak_memory_share": "share"}


def _unavailable(report: Mapping[str, Any], fact: str) -> str | None:
    return ((report.get("evidence") or {}).get("unavailable") or {}).get(fact)


def _compare(item_id: str, key: str, wanted: float, measured: float | None, reason: str, window: str) -> ItemResult:
    expected = _expected(key, wanted)
    if measured is None:
        return not_checked(item_id, reason, expected)
    ok = measured >= wanted if key.startswith("min_") else measured <= wanted
    found = f"{_show(measured, UNITS[key])} ({window})"
    return ItemResult(
        item_id, PASS if ok else FAIL, found, expected, values={"measured": measured, "threshold": wanted}
    )


def _summary(report: Mapping[str, Any]) -> Mapping[str, Any]:
    return report.get("summary") or {}


def _window(report: Mapping[str, Any]) -> str:
    steady = _summary(report).get("steady_steps")
    return f"{steady} steady steps" if steady else f"{report.get('duration_s', 0):.0f} s run"


def _too_few_steps(report: Mapping[str, Any]) -> str:
    return f"fewer than 3 steady steps outside the profiler window ({_summary(report).get('steps') or 0} steps in all)"


def sm_activity(item_id: str, key: str, wanted: float, report: Mapping[str, Any]) -> ItemResult:
    reason = _unavailable(report, "gpm") or "SM activity was not measured"
    return _compare(item_id, key, wanted, _summary(report).get("sm_activity_mean"), reason, "mean over the run")


def gpu_utilization(item_id: str, key: str, wanted: float, report: Mapping[str, Any]) -> ItemResult:
    reason = _unavailable(report, "gpu") or "GPU utilization was not measured"
    return _compare(item_id, key, wanted, _summary(report).get("gpu_util_mean"), reason, "mean over the run")


def data_wait(item_id: str, key: str, wanted: float, report: Mapping[str, Any]) -> ItemResult:
    reason = "no DataLoader seen and no step records: the wait for data was not measured"
    return _compare(item_id, key, wanted, _summary(report).get("data_wait_share"), reason, _window(report))


def samples_per_s(item_id: str, key: str, wanted: float, report: Mapping[str, Any]) -> ItemResult:
    summary = _summary(report)
    reason = ("the batch size is unknown (no DataLoader seen)" if summary.get("steps_per_s") is not None
              else _too_few_steps(report))
    return _compare(item_id, key, wanted, summary.get("samples_per_s"), reason, _window(report))


def steps_per_s(item_id: str, key: str, wanted: float, report: Mapping[str, Any]) -> ItemResult:
    return _compare(item_id, key, wanted, _summary(report).get("steps_per_s"), _too_few_steps(report), _window(report))


def step_time(item_id: str, key: str, wanted: float, report: Mapping[str, Any]) -> ItemResult:
    median = _summary(report).get("step_time_median_s")
    measured = median * 1e3 if median is not None else None
    return _compare(item_id, key, wanted, measured, _too_few_steps(report), "median, " + _window(report))


def peak_memory(item_id: str, key: str, wanted: float, report: Mapping[str, Any]) -> ItemResult:
    peak = _summary(report).get("peak_memory_allocated_bytes")
    gpus = (report.get("environment") or {}).get("gpus") or []
    total = next(
        (g.get("memory_total_bytes") for g in gpus if isinstance(g, Mapping) and g.get("memory_total_bytes")), None
    )
    if peak is None or not total:
        reason = ("no CUDA allocator statistics (the job put no tensor on a GPU)" if peak is None
                  else "the GPU's memory size is unknown")
        return not_checked(item_id, reason, _expected(key, wanted))
    result = _compare(item_id, key, wanted, peak / total, "", "torch.cuda.max_memory_allocated")
    found = f"{result.found}: {format_bytes(peak)} of {format_bytes(total)}"
    return ItemResult(item_id, result.status, found, result.expected, values={**result.values, "peak_bytes": peak})


def critical(item_id: str, key: str, wanted: Any, report: Mapping[str, Any]) -> ItemResult:
    found_critical = [f for f in report.get("findings") or [] if f.get("severity") == "critical"]
    if not found_critical:
        checks = report.get("checks") or []
        ran = sum(1 for c in checks if c.get("status") in ("pass", "finding"))
        return ItemResult(item_id, PASS, f"no critical finding ({ran} of {len(checks)} checks could run)",
                          "no critical finding", values={"critical": []})
    names = ", ".join(f"{f.get('id')} {f.get('title')}" for f in found_critical[:3])
    return ItemResult(item_id, FAIL, f"{len(found_critical)} critical: {names}", "no critical finding",
                      values={"critical": [f.get("id") for f in found_critical]})


THRESHOLDS: tuple[tuple[str, str, Callable[..., ItemResult]], ...] = (
    ("min_sm_activity", "PF902", sm_activity),
    ("min_gpu_utilization", "PF903", gpu_utilization),
    ("max_data_wait_share", "PF904", data_wait),
    ("no_critical_findings", "PF905", critical),
    ("min_samples_per_s", "PF906", samples_per_s),
    ("min_steps_per_s", "PF907", steps_per_s),
    ("max_step_time_ms", "PF908", step_time),
    ("max_peak_memory_share", "PF909", peak_memory),
)
