"""Before/after comparison of two reports: the A/B check the playbook asks for.

Pure functions from two report dicts (schema gpudoctor.report/1) to a diff dict
(schema gpudoctor.diff/1); rendering lives in gpudoctor.reports. A comparison is
only meaningful on the same hardware and the same workload, so `comparability`
says why two reports differ and the command refuses unless --force.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpudoctor import __version__
from gpudoctor.agent.redact import redact_argv
from gpudoctor.diff_stats import MIN_STEADY_STEPS, significance, steady_durations, step_time_stats

DIFF_SCHEMA = "gpudoctor.diff/1"
# launchers whose own name says nothing about the workload they start
LAUNCHERS = {"python", "python3", "torchrun", "accelerate", "launch", "deepspeed", "env", "srun", "mpirun", "bash", "sh", "uv", "run"}
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


# metrics that are step time in another form: their change is real only when significant
TIMING_KEYS = ("samples_per_s", "steps_per_s", "step_time_median_s")


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
        if arg and not arg.startswith("-") and "=" not in arg and name not in LAUNCHERS and not name.startswith("python"):
            return "command:" + name
    return None


def gpu_names(report: Mapping[str, Any]) -> list[str]:
    gpus = (report.get("environment") or {}).get("gpus") or []
    return sorted(str(g.get("name") or "unknown") for g in gpus if isinstance(g, Mapping))


def comparability(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Reasons the two reports are not a fair A/B (empty when they are)."""
    reasons = []
    gb, ga = gpu_names(before), gpu_names(after)
    if gb != ga:
        reasons.append(f"different GPUs: {_gpus(gb)} before, {_gpus(ga)} after")
    wb, wa = workload_identity(before.get("command")), workload_identity(after.get("command"))
    if wb and wa and wb != wa:
        reasons.append(f"different workloads: {wb.split(':', 1)[1]} before, {wa.split(':', 1)[1]} after")
    return reasons


def _gpus(names: list[str]) -> str:
    return ", ".join(names) if names else "no GPU"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def compare_metric(metric: Metric, before: Any, after: Any) -> dict[str, Any]:
    b, a = _number(before), _number(after)
    entry: dict[str, Any] = {
        "key": metric.key,
        "label": metric.label,
        "unit": metric.unit,
        "before": before,
        "after": after,
        "change": None,
        "relative_change": None,
        "verdict": "not measured",
    }
    if b is None or a is None:
        return entry  # one side unmeasured: never pretend the change is zero
    entry["change"] = a - b
    entry["relative_change"] = (a / b - 1.0) if b != 0 else None
    size = abs(entry["relative_change"]) if metric.relative_noise and entry["relative_change"] is not None else abs(a - b)
    if size <= metric.noise:
        entry["verdict"] = "unchanged"
    elif metric.higher_is_better is None:
        entry["verdict"] = "changed"
    else:
        entry["verdict"] = "better" if (a > b) == metric.higher_is_better else "worse"
    return entry


def speedup(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """End-to-end speedup: samples/s when both runs know their batch size, else steps/s
    when the batch is known to be the same; otherwise not comparable."""
    sb, sa = before.get("summary") or {}, after.get("summary") or {}
    b, a = _number(sb.get("samples_per_s")), _number(sa.get("samples_per_s"))
    if b and a is not None:
        return {"value": a / b, "basis": "samples/s", "note": None}
    b, a = _number(sb.get("steps_per_s")), _number(sa.get("steps_per_s"))
    if b and a is not None:
        if sb.get("batch_size") != sa.get("batch_size") or sb.get("batch_size") is None:
            return {"value": None, "basis": "steps/s", "note": "batch size unknown or different: steps/s alone do not compare work done"}
        return {"value": a / b, "basis": "steps/s", "note": None}
    return {"value": None, "basis": None, "note": "throughput not measured in both runs"}


def _side(report: Mapping[str, Any], name: str | None) -> dict[str, Any]:
    summary = report.get("summary") or {}
    return {
        "file": name,
        "command": redact_argv([str(a) for a in report.get("command") or []]),
        "workload": workload_identity(report.get("command")),
        "gpus": gpu_names(report),
        "started_at": report.get("started_at"),
        "duration_s": report.get("duration_s"),
        "exit_code": report.get("exit_code"),
        "verdict": summary.get("verdict"),
        "tool_version": (report.get("tool") or {}).get("version"),
    }


def compare_findings(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Findings resolved (before only), new (after only), changed (both, another severity:
    critical -> warning is progress, not "unchanged") and unchanged (both, same severity), by ID."""
    fb = {str(f.get("id")): f for f in before.get("findings") or []}
    fa = {str(f.get("id")): f for f in after.get("findings") or []}

    def entry(fid: str, b: Mapping[str, Any] | None, a: Mapping[str, Any] | None) -> dict[str, Any]:
        ref = a or b or {}
        return {
            "id": fid,
            "title": ref.get("title"),
            "severity_before": b.get("severity") if b else None,
            "severity_after": a.get("severity") if a else None,
            "consequence_of": ref.get("consequence_of"),
        }

    return {
        "resolved": [entry(i, fb[i], None) for i in fb if i not in fa],
        "new": [entry(i, None, fa[i]) for i in fa if i not in fb],
        "changed": [entry(i, fb[i], fa[i]) for i in fa if i in fb and fb[i].get("severity") != fa[i].get("severity")],
        "unchanged": [entry(i, fb[i], fa[i]) for i in fa if i in fb and fb[i].get("severity") == fa[i].get("severity")],
    }


def compare(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    before_name: str | None = None,
    after_name: str | None = None,
    forced: bool = False,
    before_steps: Sequence[float] | None = None,
    after_steps: Sequence[float] | None = None,
) -> dict[str, Any]:
    """`before_steps`/`after_steps`: the steady steps' durations from the Sessions (else
    the reports' timelines), for the sample sizes and the spread."""
    sb, sa = before.get("summary") or {}, after.get("summary") or {}
    metrics = [compare_metric(m, sb.get(m.key), sa.get(m.key)) for m in METRICS]
    findings = compare_findings(before, after)
    stats_b = step_time_stats(steady_durations(before) if before_steps is None else before_steps)
    stats_a = step_time_stats(steady_durations(after) if after_steps is None else after_steps)
    sp = speedup(before, after)
    per_sample = sp.get("basis") == "samples/s"
    sig = significance(stats_b, stats_a, float(sb.get("batch_size") or 1) if per_sample else 1.0,
                       float(sa.get("batch_size") or 1) if per_sample else 1.0)
    sp["significant"] = sig["significant"] if sp.get("value") is not None else None
    if not sig["significant"]:
        for m in metrics:
            if m["key"] in TIMING_KEYS and m["verdict"] in ("better", "worse"):
                m["verdict"] = "too few steps" if stats_b["steady_steps"] < MIN_STEADY_STEPS or \
                    stats_a["steady_steps"] < MIN_STEADY_STEPS else "within noise"
    result = {
        "schema": DIFF_SCHEMA,
        "tool": {"name": "gpudoctor", "version": __version__},
        "before": _side(before, before_name),
        "after": _side(after, after_name),
        "comparable": {"reasons": comparability(before, after), "forced": forced},
        "speedup": sp,
        "samples": {"before": stats_b, "after": stats_a, **sig},
        "metrics": metrics,
        "findings": findings,
        "timelines": {
            "before": (before.get("evidence") or {}).get("timeline"),
            "after": (after.get("evidence") or {}).get("timeline"),
        },
    }
    result["verdict"] = verdict(result)
    return result


def verdict(diff: Mapping[str, Any]) -> str:
    """One sentence: the speedup, the biggest moves, what the findings did."""
    parts = []
    sp = diff.get("speedup") or {}
    samples = diff.get("samples") or {}
    if sp.get("value") is not None:
        value = sp["value"]
        if abs(value - 1.0) <= 0.02:
            parts.append(f"throughput unchanged ({sp['basis']})")
        elif sp.get("significant") is False:
            measured = f"{value:.2f}x faster" if value > 1 else f"{1 / value:.2f}x slower"
            parts.append(f"no real difference shown: after measured {measured} ({sp['basis']}), but "
                         f"{samples.get('reason') or 'the samples are too few or too noisy'}")
        elif value > 1:
            parts.append(f"after is {value:.2f}x faster ({sp['basis']})")
        else:
            parts.append(f"after is {1 / value:.2f}x slower ({sp['basis']})")
    else:
        parts.append("speedup not comparable" + (f": {sp['note']}" if sp.get("note") else ""))
    for m in diff.get("metrics") or []:
        if m["key"] in ("data_wait_share", "sm_activity_mean") and m["verdict"] in ("better", "worse"):
            if m["key"] == "data_wait_share":
                parts.append(f"data wait {m['before']:.0%} to {m['after']:.0%}")
            else:
                parts.append(f"SM activity {m['before']:.0f}% to {m['after']:.0f}%")
    f = diff.get("findings") or {}
    parts.append(f"{len(f.get('resolved', []))} finding(s) resolved, {len(f.get('new', []))} new, "
                 f"{len(f.get('changed', []))} changed severity, {len(f.get('unchanged', []))} unchanged")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."
