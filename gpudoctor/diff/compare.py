"""Before/after comparison of two reports: the A/B check the playbook asks for.

Pure functions from two reports (gpudoctor.verdict.report_model.Report, or their JSON dicts) to
a typed `Diff` (gpudoctor.diff.diff_model, schema gpudoctor.diff/1); rendering lives in
gpudoctor.reports. A comparison is
only meaningful on the same hardware and the same workload, so `comparability`
says why two reports differ and the command refuses unless --force.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpudoctor import __version__
from gpudoctor.agent.redact import redact_argv
from gpudoctor.base.jsonmodel import is_real
from gpudoctor.diff.diff_model import (
    DIFF_SCHEMA,
    Comparable,
    Diff,
    DiffSide,
    FindingChange,
    FindingChanges,
    MetricChange,
    MetricVerdict,
    Samples,
    Speedup,
    as_diff,
)
from gpudoctor.diff.diff_stats import MIN_STEADY_STEPS, significance, steady_durations, step_time_stats
from gpudoctor.verdict.report_model import Report, ReportFinding, Summary, Tool, as_report

__all__ = ["DIFF_SCHEMA", "comparability", "compare", "diff", "workload_identity"]
# launchers whose own name says nothing about the workload they start
LAUNCHERS = {"python", "python3", "torchrun", "accelerate", "launch", "deepspeed", "env", "srun", "mpirun", "bash",
             "sh", "uv", "run"}
LAUNCHER_MODULES = {"torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch", "deepspeed"}


@dataclass(frozen=True)
class Metric:
    key: str  # summary key in the report
    label: str
    unit: str | None
    higher_is_better: bool | None  # None: a change is neither good nor bad by itself
    noise: float  # changes below this are "unchanged": relative for rates, absolute for shares/%
    relative_noise: bool = True


METRICS = (
    Metric("samples_per_s", "Throughput", "samples/s", True, 0.02),
    Metric("steps_per_s", "Steps per second", "steps/s", True, 0.02),
    Metric("step_time_median_s", "Median step time", "s", False, 0.02),
    Metric("data_wait_share", "Data-wait share", "share", False, 0.01, relative_noise=False),
    Metric("sm_activity_mean", "SM activity (real)", "%", True, 1.0, relative_noise=False),
    Metric("tensor_activity_mean", "Tensor-core activity", "%", True, 1.0, relative_noise=False),
    Metric("gpu_util_mean", "GPU utilization (duty cycle)", "%", True, 1.0, relative_noise=False),
    Metric("cpu_percent_mean", "CPU (usable cores)", "%", None, 2.0, relative_noise=False),
    Metric("power_w_mean", "Mean power", "W", None, 0.02),
    Metric("peak_memory_allocated_bytes", "Peak memory allocated", "bytes", None, 0.02),
    Metric("batch_size", "Batch size", None, None, 0.0),
)


# metrics that are step time in another form: their change is real only when significant (the
# rates by the throughput's intervals, the median step time by its own)
RATE_KEYS = ("samples_per_s", "steps_per_s")
MEDIAN_KEYS = ("step_time_median_s",)


def workload_identity(command: Any) -> str | None:
    """What the command runs: `script:train.py`, `module:pkg.train`, or None if unknown.

    The script's base name, not its path, so the same script run from another
    directory or checkout still compares; arguments may differ (that is the A/B).
    """
    if not isinstance(command, list):
        return None
    args = [str(a) for a in command]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" and i + 1 < len(args):
            if args[i + 1] not in LAUNCHER_MODULES:
                return "module:" + args[i + 1]
            i += 2
            continue
        if arg.endswith(".py") and not arg.startswith("-"):
            return "script:" + os.path.basename(arg)
        i += 1
    for arg in args:
        name = os.path.basename(arg)
        if (arg and not arg.startswith("-") and "=" not in arg and name not in LAUNCHERS
                and not name.startswith("python")):
            return "command:" + name
    return None


def gpu_names(report: Report | Mapping[str, Any]) -> list[str]:
    gpus = as_report(report).environment.get("gpus") or []  # the Session's section: free JSON
    return sorted(str(g.get("name") or "unknown") for g in gpus if isinstance(g, Mapping))


def comparability(before: Report | Mapping[str, Any], after: Report | Mapping[str, Any]) -> list[str]:
    """Reasons the two reports are not a fair A/B (empty when they are)."""
    before, after = as_report(before), as_report(after)
    reasons = []
    gb, ga = gpu_names(before), gpu_names(after)
    if gb != ga:
        reasons.append(f"different GPUs: {_gpus(gb)} before, {_gpus(ga)} after")
    wb, wa = workload_identity(before.command), workload_identity(after.command)
    if wb and wa and wb != wa:
        reasons.append(f"different workloads: {wb.split(':', 1)[1]} before, {wa.split(':', 1)[1]} after")
    return reasons


def _gpus(names: list[str]) -> str:
    return ", ".join(names) if names else "no GPU"


def compare_metric(metric: Metric, before: float | None, after: float | None) -> MetricChange:
    b = float(before) if before is not None and is_real(before) else None
    a = float(after) if after is not None and is_real(after) else None
    unmeasured = MetricChange(key=metric.key, label=metric.label, unit=metric.unit, before=before, after=after)
    if b is None or a is None:
        return unmeasured  # one side unmeasured: never pretend the change is zero
    change = a - b
    relative = (a / b - 1.0) if b != 0 else None
    size = abs(relative) if metric.relative_noise and relative is not None else abs(change)
    verdict: MetricVerdict
    if size <= metric.noise:
        verdict = "unchanged"
    elif metric.higher_is_better is None:
        verdict = "changed"
    else:
        verdict = "better" if (a > b) == metric.higher_is_better else "worse"
    return dataclasses.replace(unmeasured, change=change, relative_change=relative, verdict=verdict)


def speedup(before: Summary, after: Summary) -> Speedup:
    """End-to-end speedup: samples/s when both runs know their batch size, else steps/s
    when the batch is known to be the same; otherwise not comparable."""
    b, a = before.samples_per_s, after.samples_per_s
    if b and a is not None:
        return Speedup(value=a / b, basis="samples/s")
    b, a = before.steps_per_s, after.steps_per_s
    if b and a is not None:
        if before.batch_size != after.batch_size or before.batch_size is None:
            return Speedup(basis="steps/s",
                           note="batch size unknown or different: steps/s alone do not compare work done")
        return Speedup(value=a / b, basis="steps/s")
    return Speedup(note="throughput not measured in both runs")


def _side(report: Report, name: str | None) -> DiffSide:
    return DiffSide(
        file=name,
        command=redact_argv(list(report.command)),
        workload=workload_identity(report.command),
        gpus=gpu_names(report),
        started_at=report.started_at,
        duration_s=report.duration_s,
        exit_code=report.exit_code,
        verdict=report.summary.verdict,
        tool_version=report.tool.version,
    )


def compare_findings(before: Report, after: Report) -> FindingChanges:
    """Findings resolved (before only), new (after only), changed (both, another severity:
    critical -> warning is progress, not "unchanged") and unchanged (both, same severity), by ID."""
    fb = {f.id: f for f in before.findings}
    fa = {f.id: f for f in after.findings}

    def entry(fid: str, b: ReportFinding | None, a: ReportFinding | None) -> FindingChange:
        ref = a or b
        assert ref is not None
        return FindingChange(id=fid, title=ref.title, severity_before=b.severity if b else None,
                             severity_after=a.severity if a else None, consequence_of=ref.consequence_of)

    return FindingChanges(
        resolved=[entry(i, fb[i], None) for i in fb if i not in fa],
        new=[entry(i, None, fa[i]) for i in fa if i not in fb],
        changed=[entry(i, fb[i], fa[i]) for i in fa if i in fb and fb[i].severity != fa[i].severity],
        unchanged=[entry(i, fb[i], fa[i]) for i in fa if i in fb and fb[i].severity == fa[i].severity],
    )


def diff(
    before: Report | Mapping[str, Any],
    after: Report | Mapping[str, Any],
    *,
    before_name: str | None = None,
    after_name: str | None = None,
    forced: bool = False,
    before_steps: Sequence[float] | None = None,
    after_steps: Sequence[float] | None = None,
) -> Diff:
    """The typed comparison. `before_steps`/`after_steps`: the steady steps' durations from
    the Sessions (else the reports' timelines), for the sample sizes and the spread."""
    before, after = as_report(before), as_report(after)
    sb, sa = before.summary, after.summary
    metrics = [compare_metric(m, getattr(sb, m.key), getattr(sa, m.key)) for m in METRICS]
    stats_b = step_time_stats(steady_durations(before) if before_steps is None else before_steps)
    stats_a = step_time_stats(steady_durations(after) if after_steps is None else after_steps)
    sp = speedup(sb, sa)
    per_sample = sp.basis == "samples/s"
    sig = significance(stats_b, stats_a, float(sb.batch_size or 1) if per_sample else 1.0,
                       float(sa.batch_size or 1) if per_sample else 1.0)
    sp = dataclasses.replace(sp, significant=sig["significant"] if sp.value is not None else None)
    few = stats_b["steady_steps"] < MIN_STEADY_STEPS or stats_a["steady_steps"] < MIN_STEADY_STEPS
    noisy = (() if sig["significant"] else RATE_KEYS) + (() if sig["median_significant"] else MEDIAN_KEYS)
    metrics = [dataclasses.replace(m, verdict="too few steps" if few else "within noise")
               if m.key in noisy and m.verdict in ("better", "worse") else m for m in metrics]
    result = Diff(
        tool=Tool(name="gpudoctor", version=__version__),
        before=_side(before, before_name),
        after=_side(after, after_name),
        comparable=Comparable(reasons=comparability(before, after), forced=forced),
        speedup=sp,
        samples=Samples.from_stats(stats_b, stats_a, sig),
        metrics=metrics,
        findings=compare_findings(before, after),
        timelines={"before": before.evidence.get("timeline"), "after": after.evidence.get("timeline")},
    )
    return dataclasses.replace(result, verdict=verdict(result))


def compare(before: Report | Mapping[str, Any], after: Report | Mapping[str, Any], **options: Any) -> dict[str, Any]:
    """The comparison's JSON dict (schema gpudoctor.diff/1): `diff(...).to_dict()`."""
    return diff(before, after, **options).to_dict()


def verdict(result: Diff | Mapping[str, Any]) -> str:
    """One sentence: the speedup, the biggest moves, what the findings did."""
    result = as_diff(result)
    parts = []
    sp = result.speedup
    if sp.value is not None:
        value = sp.value
        if abs(value - 1.0) <= 0.02:
            parts.append(f"throughput unchanged ({sp.basis})")
        elif sp.significant is False:
            measured = f"{value:.2f}x faster" if value > 1 else f"{1 / value:.2f}x slower"
            parts.append(f"no real difference shown: after measured {measured} ({sp.basis}), but "
                         f"{result.samples.reason or 'the samples are too few or too noisy'}")
        elif value > 1:
            parts.append(f"after is {value:.2f}x faster ({sp.basis})")
        else:
            parts.append(f"after is {1 / value:.2f}x slower ({sp.basis})")
    else:
        parts.append("speedup not comparable" + (f": {sp.note}" if sp.note else ""))
    for m in result.metrics:
        if m.key in ("data_wait_share", "sm_activity_mean") and m.verdict in ("better", "worse"):
            if m.key == "data_wait_share":
                parts.append(f"data wait {m.before:.0%} to {m.after:.0%}")
            else:
                parts.append(f"SM activity {m.before:.0f}% to {m.after:.0f}%")
    f = result.findings
    parts.append(f"{len(f.resolved)} finding(s) resolved, {len(f.new)} new, "
                 f"{len(f.changed)} changed severity, {len(f.unchanged)} unchanged")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."
