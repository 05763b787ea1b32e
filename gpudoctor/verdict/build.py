"""Build the finished report (the JSON contract) from a Session and the engine's result.

Renderers (gpudoctor.reports.*) receive only this dict, never the engine or the
Session object. Schema `gpudoctor.report/1`; fields are only ever added.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, TypeVar

from gpudoctor import __version__, metrics
from gpudoctor.agent.redact import redact_argv, redact_text
from gpudoctor.analysis.windows import hotspots
from gpudoctor.model import Finding, severity_rank
from gpudoctor.session import Session
from gpudoctor.trials.report import attach as attach_trials
from gpudoctor.verdict.engine import EngineResult

log = logging.getLogger(__name__)

REPORT_SCHEMA = "gpudoctor.report/1"
TIMELINE_MAX_POINTS = 600

T = TypeVar("T")

STAGE_VERDICT = {
    0: "Run failed",
    1: "Input-bound",
    2: "GPU under-used",
    3: "Kernel-bound",
    4: "Memory-bound",
    5: "Multi-GPU",
}


def finding_to_dict(f: Finding, slug: str | None = None) -> dict[str, Any]:
    return {
        "id": f.id,
        "slug": slug,
        "stage": f.stage,
        "severity": f.severity,
        "title": f.title,
        "message": f.message,
        "evidence": {k: v.to_dict() for k, v in f.evidence.items()},
        "remedy": {"text": f.remedy.text, "code": f.remedy.code} if f.remedy else None,
        "estimated_gain": round(f.estimated_gain, 2) if f.estimated_gain is not None else None,
        "prediction": f.prediction.to_dict() if f.prediction is not None else None,
        "consequence_of": f.consequence_of,
        "window": f.window,
    }


def summarize(session: Session) -> dict[str, Any]:
    from gpudoctor.analysis.gpu_state import gpu_load
    from gpudoctor.analysis.observer import overhead

    steps = metrics.step_summary(session)
    gpu_steady = metrics.gpu_samples_steady(session)
    cpu_steady = metrics.cpu_samples_steady(session)
    peak = max((a.max_allocated_bytes for a in session.allocator), default=None)
    load = gpu_load(session)
    return {
        "measured": measured_anything(session),
        "stop_reason": session.stop_reason,
        "gpu_fully_used": load.fully_used if load is not None else None,
        "gpu_load": load.describe() if load is not None else None,
        "steps": session.steps.count,
        "step_source": session.steps.source,
        "steady_steps": steps.count if steps else 0,
        "step_time_median_s": steps.step_time_median_s if steps else None,
        "steps_per_s": steps.steps_per_s if steps else None,
        "samples_per_s": steps.steps_per_s * session.batch_size if steps and session.batch_size else None,
        "data_wait_share": metrics.loader_wait_share(session),
        "gpu_util_mean": metrics.gpu_metric_mean(gpu_steady, "util_percent"),
        "sm_activity_mean": metrics.gpu_metric_mean(gpu_steady, "sm_activity"),
        "tensor_activity_mean": metrics.gpu_metric_mean(gpu_steady, "tensor_activity"),
        "power_w_mean": metrics.gpu_metric_mean(gpu_steady, "power_w"),
        "cpu_percent_mean": metrics.mean([s.system_percent for s in cpu_steady]),
        "usable_cores": metrics.usable_cores(session),
        "peak_memory_allocated_bytes": peak,
        "batch_size": session.batch_size,
        "crashed": any(e.kind in ("exception", "oom") for e in session.errors),
        "profiler_overhead": cost.to_dict() if (cost := overhead(session)) is not None else None,
        "gpu_idle_by_cause_us": dict(session.profile.idle_by_cause_us)
        if session.profile is not None and session.profile.idle_by_cause_us else None,
    }


def measured_anything(session: Session) -> bool:
    """Did the run reach anything a diagnosis can stand on: steady steps, a profiled window
    with activity, or (a GPU run without step boundaries) steady GPU samples?"""
    if metrics.step_summary(session) is not None:
        return True
    profile = session.profile
    if profile is not None and (profile.kernel_count > 0 or profile.gpu_busy_us > 0 or profile.top_ops):
        return True
    if session.steps.count > 0:
        return False  # it had steps, but too few to be steady
    return bool(session.torch_cuda_used) and len(session.gpu_samples) >= 3


def verdict(findings: list[Finding], summary: dict[str, Any], skipped: int = 0, total: int = 0,
            unknown: list[str] | None = None) -> str:
    """`unknown`: the main questions no check could answer ("data wait not measured: ..."): a
    run without findings then says so first, never a bare "No bottleneck found"."""
    if summary.get("measured") is False and not any(f.ended_run or f.stage == 0 for f in findings):
        return _nothing_measured(summary)
    numbers = _numbers(summary)
    caveat = _measured_note(findings) + _sample_caveat(summary)
    primary = [f for f in findings if f.consequence_of is None and severity_rank(f.severity) >= 1]
    failed = [f for f in primary if f.ended_run or f.stage == 0]
    if summary.get("gpu_fully_used") and not failed:
        return _gpu_bound(summary, primary) + caveat + "."
    if not primary:
        return _no_bottleneck(skipped, total, unknown) + (": " + "; ".join(numbers) if numbers else "") + caveat + "."
    top = primary[0]
    if _waits_for_data(top) and summary.get("data_wait_share") is not None:
        return f"{STAGE_VERDICT[1]}: " + "; ".join(numbers) + caveat + "."
    stage = STAGE_VERDICT.get(top.stage, "Problem")
    if top.stage == 0 and not (top.ended_run or _run_failure(top)):
        stage = "Measurement disturbed the run"  # GD002: gpudoctor's own cost, not a failed run
    if top.stage == 1 and summary.get("data_wait_share") is None:
        stage = "Host-bound"  # stage 1 without a DataLoader: the host itself (Python, staging copies)
    head = f"{stage}: {_lower(top.title)}"
    return head + ("; " + "; ".join(numbers) if numbers else "") + caveat + "."


def _run_failure(finding: Finding) -> bool:
    """Its check declares its findings the run's failure itself (Check.run_failure)."""
    from gpudoctor.verdict.registry import checks_by_id

    check = checks_by_id().get(finding.id)
    return check is None or check.run_failure


def _nothing_measured(summary: dict[str, Any]) -> str:
    """The verdict of a run that measured nothing steady (and did not fail): why not."""
    steps = summary.get("steps") or 0
    if steps:
        why = f"the run ended after {steps} step(s), before enough steady ones (run longer)"
    elif summary.get("step_source") is None and summary.get("stop_reason") == "exited":
        why = ("the run showed no step boundaries and no profiled window (mark steps with gpudoctor.step(), "
               "or run longer)")
    else:
        why = "the run ended before its first step (run longer)"
    return f"Nothing steady was measured: {why}; no verdict on no evidence."


def _numbers(summary: dict[str, Any]) -> list[str]:
    """The measured numbers a verdict quotes: the data wait, then the GPU's activity."""
    numbers = []
    if summary.get("data_wait_share") is not None:
        numbers.append(f"the loop waited for data {summary['data_wait_share']:.0%} of each step")
    if summary.get("sm_activity_mean") is not None:
        numbers.append(f"GPU SMs were active {summary['sm_activity_mean']:.0f}% of the time")
    elif summary.get("gpu_util_mean") is not None:
        numbers.append(f"GPU utilization averaged {summary['gpu_util_mean']:.0f}%")
    return numbers


def _gpu_bound(summary: dict[str, Any], primary: list[Finding]) -> str:
    """A fully used GPU's verdict head, naming the top finding that makes the work cheaper."""
    head = f"GPU-bound: the GPU is fully used ({summary.get('gpu_load')})"
    if primary:
        top = primary[0]
        gain = f", {top.estimated_gain:.2f}x predicted" if top.estimated_gain else ""
        head += f"; the work itself can get cheaper: {_lower(top.title)} ({top.id}{gain})"
    return head


def _no_bottleneck(skipped: int, total: int, unknown: list[str] | None) -> str:
    """The head of a verdict without findings: what could not run and what was not measured."""
    head = "No bottleneck found"
    if skipped:
        head += f" by the {total - skipped} of {total} checks that could run ({skipped} skipped: see why below)"
    if unknown:
        head = "; ".join(unknown) + "; " + _lower(head) + ("" if skipped else " among what was measured")
        head = head[:1].upper() + head[1:]
    return head


def _waits_for_data(finding: Finding) -> bool:
    """Its check declares its findings a form of the loop waiting for data (Check.data_wait)."""
    from gpudoctor.verdict.registry import checks_by_id

    declared = checks_by_id().get(finding.id)
    return declared is not None and declared.data_wait


def _measured_note(findings: list[Finding]) -> str:
    """'; measured, not predicted: GD101's remedy (num_workers=8) gave 0.97x, demoted' for the
    findings whose --try trial measured no gain (gpudoctor.verdict.gains.measured_over_predicted)."""
    tried = [f for f in findings if f.measured_gain is not None]
    if not tried:
        return ""
    parts = [f"{f.id}'s remedy ({f.measured_with}) gave {f.measured_gain:.2f}x"
             + (f" against {f.estimated_gain:.2f}x predicted" if f.estimated_gain is not None else "")
             for f in tried]
    return "; measured by --try, no gain: " + ", ".join(parts) + " (demoted, no longer critical)"


def _lower(title: str) -> str:
    """A title inside a sentence: its first letter lowered, unless it starts an acronym (GPU, OOM)."""
    if title[1:2].isupper():
        return title
    return title[:1].lower() + title[1:]


def _sample_caveat(summary: dict[str, Any]) -> str:
    steady = summary.get("steady_steps") or 0
    if summary.get("step_source") and 0 < steady < metrics.MIN_STEADY_STEPS:
        return (f" (from only {steady} steady steps: too few for a firm verdict, measure at least "
                f"{metrics.MIN_STEADY_STEPS})")
    return ""


def _downsample(values: list[T], limit: int) -> list[T]:
    if len(values) <= limit:
        return values
    stride = len(values) / limit
    return [values[int(i * stride)] for i in range(limit)]


def timeline(session: Session) -> dict[str, Any]:
    """Time series for the report's charts (downsampled, aligned on session time)."""
    cpu = _downsample(session.cpu_samples, TIMELINE_MAX_POINTS)
    gpu = _downsample([g for g in session.gpu_samples if g.gpu_index == _first_gpu(session)], TIMELINE_MAX_POINTS)
    records = session.steps.records
    step_points = _downsample(records, TIMELINE_MAX_POINTS)
    return {
        "cpu": {
            "t": [round(s.t, 3) for s in cpu],
            "system_percent": [s.system_percent for s in cpu],
            "main_thread_percent": [s.main_thread_percent for s in cpu],
            "workers_percent": [s.workers_percent for s in cpu],
        },
        "gpu": {
            "t": [round(g.t, 3) for g in gpu],
            "util_percent": [g.util_percent for g in gpu],
            "sm_activity": [g.sm_activity for g in gpu],
            "tensor_activity": [g.tensor_activity for g in gpu],
            "power_w": [g.power_w for g in gpu],
            "memory_used_bytes": [g.memory_used_bytes for g in gpu],
        },
        "steps": {
            "t": [round(r.t, 3) for r in step_points],
            "duration_s": [r.duration_s for r in step_points],
            "data_wait_s": [r.data_wait_s for r in step_points],
        },
    }


def _first_gpu(session: Session) -> int | None:
    return session.gpu_samples[0].gpu_index if session.gpu_samples else None


def check_docs(ids: Iterable[str]) -> dict[str, str]:
    """Each check's explain page (its module docstring), so a report explains itself offline.

    A broken or half-installed check package must never cost the user the report,
    so any failure to load the catalog yields no docs rather than an exception.
    """
    wanted = set(ids)
    try:
        from gpudoctor.verdict.registry import load_checks

        checks, _ = load_checks()
    except Exception as exc:  # noqa: BLE001  (docs are a nicety; the report must still be built)
        log.debug("check docs unavailable: %s", exc)
        return {}
    return {c.id: c.doc.strip() for c in checks if c.id in wanted and c.doc and c.doc.strip()}


def _redact_evidence(data: dict[str, Any]) -> None:
    """Defence in depth: the agent redacts at the source, but a Session may come from
    elsewhere (analyze, an older agent, a hand-edited file) and reports get attached
    to tickets, so argv and error text are masked again here (idempotent)."""
    for proc in data.get("processes") or []:
        if isinstance(proc.get("argv"), list):
            proc["argv"] = redact_argv(proc["argv"])
    for err in data.get("errors") or []:
        for key in ("message", "traceback"):
            if isinstance(err.get(key), str):
                err[key] = redact_text(err[key])


def build_report(
    session: Session,
    result: EngineResult,
    *,
    files: dict[str, str] | None = None,
    slugs: dict[str, str] | None = None,
    docs: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The report dict. `docs` maps check ID -> explain page; by default it is read
    from the installed checks (pass {} to leave the pages out)."""
    slugs = slugs or {o.id: o.slug for o in result.outcomes}
    summary = summarize(session)
    skipped = sum(1 for o in result.outcomes if o.status in ("skipped", "error"))
    unknown = [f"{o.decides} not measured: {o.reason}" for o in result.outcomes
               if o.decides and o.status in ("skipped", "error")]
    summary["verdict"] = verdict(result.findings, summary, skipped, len(result.outcomes), unknown)
    data = session.to_dict()
    _redact_evidence(data)
    if docs is None:
        docs = check_docs([o.id for o in result.outcomes] + [f.id for f in result.findings])
    report = {
        "schema": REPORT_SCHEMA,
        "tool": {"name": "gpudoctor", "version": __version__},
        "command": redact_argv(session.command),
        "exit_code": session.exit_code,
        "duration_s": round(session.duration_s, 3),
        "started_at": session.started_at,
        "stop_reason": session.stop_reason,
        "source": session.source,
        "environment": data["environment"],
        "summary": summary,
        "findings": [finding_to_dict(f, slugs.get(f.id)) for f in result.findings],
        "checks": [
            {"id": o.id, "slug": o.slug, "stage": o.stage, "title": o.title, "status": o.status, "reason": o.reason}
            for o in result.outcomes
        ],
        "files": files or {},
        "evidence": {
            "timeline": timeline(session),
            "loaders": data["loaders"],
            "storage": data["storage"],
            "profile": data["profile"],
            "profiles": data["profiles"],  # every window, the primary first (session order)
            "hotspots": [hotspots(p) for p in session.windows()],  # per window, the primary first
            "allocator": data["allocator"],
            "errors": data["errors"],
            "processes": data["processes"],
            "unavailable": data["unavailable"],
            "notes": data["notes"],
            "gpu_sample_interval_s": session.gpu_sample_interval_s,
            "cpu_sample_interval_s": session.cpu_sample_interval_s,
        },
        "docs": docs,
    }
    attach_trials(report, session)  # --try: overrides, trials, untried; findings[i].trial
    if session.ranks:  # a distributed job (gpudoctor/analysis/ranks.py)
        from gpudoctor.analysis.ranks import ranks_section

        report["ranks"] = ranks_section(session)
    return report
