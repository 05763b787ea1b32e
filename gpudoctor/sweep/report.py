"""The sweep's finished report: a typed `SweepReport`, schema `gpudoctor.sweep/1` (docs/sweep.md).

Renderers (gpudoctor.reports.sweep_*) receive only the report (gpudoctor.sweep.sweep_model).
Units are SI in the JSON (seconds, bytes, watts, samples per second); fields are only ever added.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

from gpudoctor import __version__
from gpudoctor.base.jsonmodel import decode
from gpudoctor.sweep import records
from gpudoctor.sweep.analysis import Analysis, analyze
from gpudoctor.sweep.recommend import observations, offline, online
from gpudoctor.sweep.records import TrialResult, TrialSpec
from gpudoctor.sweep.search import EDGE_RESOLUTION, SearchOutcome, SearchPlan
from gpudoctor.sweep.stability import DEFAULT_MIN_TIME_S, MIN_TIGHT_ITERS
from gpudoctor.sweep.sweep_model import (
    SWEEP_SCHEMA,
    EdgePrediction,
    Recommendation,
    SearchSummary,
    StabilitySettings,
    SweepReport,
    SweepResults,
    SweepSettings,
    SweepTarget,
    SweepTrial,
)
from gpudoctor.verdict.report_model import Tool

__all__ = ["SWEEP_SCHEMA", "analysis_dict", "build_sweep_report", "search_summary", "stability_text"]

STABILITY_RULE_TEXT = (
    "After warm-up (again at every size: at least {warmup_iters} iterations and {warmup_s:g} s, then until the "
    "step times stop falling), timed "
    "iterations run until there are at least {min_iters} of them and {min_time} of measured time, the 95% "
    "confidence interval of the median (order statistics) is within +/-{ci:.0%}, and the medians of the first "
    "and second halves differ by less than {drift:.0%} (from {tight} iterations when both are within half that); "
    "at {max_time_s:g} s the size is kept and marked not stable, "
    "as is a size whose p90 is more than {tail:g}x its median (a heavy tail)."
)


def stability_text(spec: TrialSpec) -> str:
    gpu, cpu = DEFAULT_MIN_TIME_S["cuda"], DEFAULT_MIN_TIME_S["cpu"]
    min_time = f"{spec.min_time_s:g} s" if spec.min_time_s else f"{gpu:g} s (GPU) / {cpu:g} s (CPU)"
    return STABILITY_RULE_TEXT.format(
        warmup_iters=spec.warmup_min_iters, warmup_s=spec.warmup_min_s, min_iters=spec.min_iters,
        min_time=min_time, ci=spec.rel_ci_target, drift=spec.drift_target, max_time_s=spec.max_time_s,
        tail=spec.tail_target, tight=MIN_TIGHT_ITERS,
    )


def search_summary(plan: SearchPlan, outcome: SearchOutcome) -> SearchSummary:
    ran = [t for t in outcome.trials if t.status != records.SKIPPED]
    predicted = outcome.edge_prediction
    return SearchSummary(
        sizes_measured=sum(1 for t in ran if t.ok and not t.fit_probe),
        sizes_probed=sum(1 for t in ran if t.ok and t.fit_probe),
        sizes_failed=sum(1 for t in ran if not t.ok),
        edge_prediction=EdgePrediction(
            batch_size=round(predicted.batch_size, 1), per_sample_bytes=round(predicted.per_sample_bytes, 1),
            fixed_bytes=round(predicted.fixed_bytes, 1), limit_bytes=predicted.limit_bytes,
            sizes=list(predicted.sizes),
        ) if predicted is not None else None,
        predict_edge=plan.predict_edge, edge_resolution=EDGE_RESOLUTION, max_edge_trials=plan.max_edge_trials,
        edge_bound=outcome.edge_bound, prediction_low=True if outcome.prediction_low else None,
    )


def _first(trials: Sequence[TrialResult], attribute: str) -> dict[str, Any]:
    for trial in sorted(trials, key=lambda t: not t.ok):
        value = getattr(trial, attribute)
        if value:
            return dict(value)
    return {}


def _trial_dict(trial: TrialResult, order: int | None) -> dict[str, Any]:
    data = trial.to_dict()
    data["order"] = order  # position in the run sequence; None for sizes never run
    data["fit_probe"] = True if trial.fit_probe else None  # written only for a probe (older reports lack it)
    data["reuse_fallback"] = trial.reuse_fallback  # these three: written only when set
    data["phase_s"] = dict(trial.phase_s) or None
    data["memory"]["peak_bytes"] = trial.memory.peak_bytes
    if trial.gpu is not None:
        data["gpu"]["power_fraction"] = trial.gpu.power_fraction
    return data


def analysis_dict(analysis: Analysis) -> dict[str, Any]:
    memory = dataclasses.asdict(analysis.memory)
    memory["found"] = analysis.memory.found
    return {
        "knee": dataclasses.asdict(analysis.knee),
        "knee_sm_activity": dataclasses.asdict(analysis.knee_sm_activity) if analysis.knee_sm_activity else None,
        "memory_edge": memory,
        "latency": dataclasses.asdict(analysis.latency) if analysis.latency else None,
        "power": [dataclasses.asdict(p) for p in analysis.power],
    }


def build_sweep_report(
    *,
    target: str,
    spec: TrialSpec,
    plan: SearchPlan,
    outcome: SearchOutcome,
    headroom: float,
    command: list[str],
    duration_s: float,
    files: dict[str, str] | None = None,
) -> SweepReport:
    trials = outcome.trials
    analysis = analyze(trials, headroom, plan.latency_p50_budget_s)
    run_order = {id(t): i for i, t in enumerate(t for t in trials if t.status != records.SKIPPED)}
    ordered = sorted(trials, key=lambda t: (t.batch_size, run_order.get(id(t), 1 << 30)))
    recs = [offline(trials, analysis, spec.mode), online(trials, analysis, spec.mode)]
    device = _first(trials, "device")
    return SweepReport(
        schema=SWEEP_SCHEMA,
        tool=Tool(name="gpudoctor", version=__version__),
        command=list(command),
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        duration_s=round(duration_s, 3),
        target=SweepTarget(
            spec=target,
            mode=spec.mode,
            dtype=spec.dtype,
            compile=spec.compile,
            input_shape=list(spec.input_shape) if spec.input_shape else None,
            device_requested=spec.device,
        ),
        device=device,
        environment=_first(trials, "environment"),
        settings=SweepSettings(
            search=plan.mode,
            start=plan.start,
            max_batch=plan.max_batch,
            batch_sizes=list(plan.batch_sizes) if plan.batch_sizes else None,
            latency_p50_budget_s=plan.latency_p50_budget_s,
            headroom=headroom,
            stability=StabilitySettings(
                rule=stability_text(spec),
                warmup_min_iters=spec.warmup_min_iters,
                warmup_min_s=spec.warmup_min_s,
                min_iters=spec.min_iters,
                min_time_s=spec.min_time_s or DEFAULT_MIN_TIME_S.get(device.get("type", ""), None),
                max_time_s=spec.max_time_s,
                rel_ci_target=spec.rel_ci_target,
                drift_target=spec.drift_target,
                tail_target=spec.tail_target,
            ),
        ),
        stop_reason=outcome.stop_reason,
        failed=outcome.failed,
        interrupted=outcome.interrupted,
        search=search_summary(plan, outcome),
        trials=[decode(SweepTrial, _trial_dict(t, run_order.get(id(t)))) for t in ordered],
        results=decode(SweepResults, analysis_dict(analysis)),
        recommendations={r.regime: decode(Recommendation, dataclasses.asdict(r)) for r in recs},
        observations=observations(analysis),
        files=dict(files or {}),
    )
