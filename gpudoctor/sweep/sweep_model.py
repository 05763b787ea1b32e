"""The batch-size sweep's report as typed data: schema ``gpudoctor.sweep/1`` (docs/sweep.md).

`gpudoctor.sweep.report.build_sweep_report` builds a `SweepReport`; its renderers
(gpudoctor.reports.sweep_*) read it; `SweepReport.to_dict` is its JSON, through the same
codec as the report and the diff (gpudoctor.jsonmodel). Units are SI (seconds, bytes,
watts, samples per second); "not measured" is null, never zero. Fields are only ever added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpudoctor.base.jsonmodel import decode, encode, extra_field, json_field, nulled_non_finite
from gpudoctor.verdict.report_model import Tool

SWEEP_SCHEMA = "gpudoctor.sweep/1"
SCHEMA_ID = "https://gpudoctor.dev/schemas/sweep-v1.schema.json"

TrialStatus = Literal["ok", "oom", "cuda_error", "error", "bad_target", "crashed", "timeout", "skipped"]


@dataclass(frozen=True)
class SweepTarget:
    """What was swept, and how."""

    spec: str = json_field("", always=True, doc="FILE.py:NAME or package.module:NAME")
    mode: str = json_field("", always=True, doc="infer or train")
    dtype: str = json_field("", always=True, doc="float32, or the autocast dtype")
    compile: bool = json_field(False, always=True)
    input_shape: list[int] | None = json_field(None, always=True, doc="one sample's shape, for a plain nn.Module")
    device_requested: str = json_field("", always=True, doc="auto, cpu, cuda or cuda:N")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class StabilitySettings:
    """When a batch size's timing counts as measured (the stability rule)."""

    rule: str = json_field("", always=True, doc="the rule in words")
    warmup_min_iters: int = json_field(0, always=True)
    warmup_min_s: float = json_field(0.0, always=True)
    min_iters: int = json_field(0, always=True)
    min_time_s: float | None = json_field(None, always=True)
    max_time_s: float = json_field(0.0, always=True)
    rel_ci_target: float = json_field(0.0, always=True, doc="half-width of the median's 95% interval, relative")
    drift_target: float = json_field(0.0, always=True, doc="first-half vs second-half median, relative")
    tail_target: float | None = json_field(None, omit_none=True,
                                           doc="p90 / median above which a size is not stable (a heavy tail)")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class SweepSettings:
    """How the sizes were chosen."""

    search: str = json_field("", always=True, doc="search (doubling, then bisection) or explicit")
    start: int = json_field(1, always=True)
    max_batch: int = json_field(0, always=True)
    batch_sizes: list[int] | None = json_field(None, always=True, doc="the sizes given (explicit search)")
    latency_p50_budget_s: float | None = json_field(None, always=True)
    headroom: float = json_field(0.0, always=True, doc="memory kept free, a fraction of capacity")
    stability: StabilitySettings = json_field(default_factory=StabilitySettings, always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class TrialTiming:
    """Per-iteration times of the timed window (after warm-up)."""

    timer: str = json_field("", always=True, doc="cuda_events or perf_counter")
    iterations: int = json_field(0, always=True)
    measured_s: float = json_field(0.0, always=True, doc="sum of the timed iterations")
    wall_s: float = json_field(0.0, always=True)
    warmup_iterations: int = json_field(0, always=True)
    warmup_s: float = json_field(0.0, always=True)
    step_time_mean_s: float = json_field(0.0, always=True)
    step_time_median_s: float = json_field(0.0, always=True)
    latency_p50_s: float = json_field(0.0, always=True)
    latency_p90_s: float = json_field(0.0, always=True)
    latency_p99_s: float = json_field(0.0, always=True)
    samples_per_s: float = json_field(0.0, always=True)
    stable: bool = json_field(False, always=True)
    rel_ci_half_width: float | None = json_field(None, always=True)
    drift: float | None = json_field(None, always=True)
    stop_reason: str = json_field("", always=True)
    warmup_stop_reason: str | None = json_field(None, omit_none=True,
                                                doc="why the warm-up ended: the step times stopped falling "
                                                    "(settled), or its time cap; absent in older reports")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class TrialMemory:
    """Memory of one size; peak_bytes decides whether it fits (reserved on GPU, RSS on CPU)."""

    capacity_bytes: int | None = json_field(None, always=True)
    free_at_start_bytes: int | None = json_field(None, always=True)
    model_bytes: int | None = json_field(None, always=True)
    peak_allocated_bytes: int | None = json_field(None, always=True)
    peak_reserved_bytes: int | None = json_field(None, always=True)
    peak_rss_bytes: int | None = json_field(None, always=True)
    alloc_retries: int | None = json_field(None, always=True)
    unavailable: dict[str, str] = json_field(default_factory=dict, always=True, doc="measurement -> why not")
    peak_bytes: int | None = json_field(None, always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class TrialGpu:
    """What NVML saw during the timed window of one size."""

    util_percent_mean: float | None = json_field(None, always=True)
    sm_activity_percent: float | None = json_field(None, always=True)
    tensor_activity_percent: float | None = json_field(None, always=True)
    dram_bw_util_percent: float | None = json_field(None, always=True)
    power_w_mean: float | None = json_field(None, always=True)
    power_w_max: float | None = json_field(None, always=True)
    power_limit_w: float | None = json_field(None, always=True)
    clock_event_reasons: list[str] = json_field(default_factory=list, always=True)
    samples: int = json_field(0, always=True)
    unavailable: dict[str, str] = json_field(default_factory=dict, always=True, doc="measurement -> why not")
    power_fraction: float | None = json_field(None, always=True, doc="mean power over the limit")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class TrialFitCheck:
    """How a size run only to learn whether it fits was run: a few steps, untimed."""

    steps: int = json_field(0, always=True, doc="steps run, the first included (where autotuners and "
                                                  "workspaces allocate), each synchronised; no warm-up rule, "
                                                  "no timed window")
    cudnn_benchmark: bool | None = json_field(None, always=True,
                                              doc="torch.backends.cudnn.benchmark during the check; null: no cuDNN")
    cudnn_benchmark_target: bool | None = json_field(None, always=True,
                                                     doc="the setting the target had made (restored after the "
                                                         "check; timed sizes always run with it)")
    note: str = json_field("", always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class SweepTrial:
    """One batch size: measured, out of memory, failed or skipped."""

    json_label = "trial"

    batch_size: int = json_field()
    status: TrialStatus = json_field()
    message: str | None = json_field(None, always=True, doc="one line, for anything but ok")
    phase: str | None = json_field(None, always=True, doc="where it failed: load, build, warmup, measure")
    error_code: str | None = json_field(None, always=True)
    timing: TrialTiming | None = json_field(None, always=True)
    memory: TrialMemory = json_field(default_factory=TrialMemory, always=True)
    gpu: TrialGpu | None = json_field(None, always=True)
    gpu_unavailable: str | None = json_field(None, always=True, doc="why gpu is null")
    device: dict[str, Any] = json_field(default_factory=dict, always=True)
    environment: dict[str, Any] = json_field(default_factory=dict, always=True)
    duration_s: float | None = json_field(None, always=True)
    order: int | None = json_field(None, always=True, doc="position in the run sequence; null: never run")
    fit_probe: bool | None = json_field(None, omit_none=True,
                                        doc="true: a size past the knee run only to learn whether it fits (few timed "
                                            "iterations): its memory counts, not its timing; absent otherwise")
    fit_check: TrialFitCheck | None = json_field(None, omit_none=True,
                                                 doc="set when the size ran as a fit check (a few steps to the peak "
                                                     "memory, untimed: its timing block holds those steps); absent "
                                                     "for a timed size and in older reports, whose fit probes ran "
                                                     "the warm-up and three timed iterations")
    process_reused: bool | None = json_field(None, omit_none=True,
                                             doc="true: ran in the process of an earlier size (far from the memory "
                                                 "edge; its peak statistics reset between sizes); false: in a fresh "
                                                 "process; absent in reports that did not say")
    reuse_fallback: str | None = json_field(None, omit_none=True,
                                            doc="the failure of a first run in a reused process; this answer is "
                                                "the fresh process's")
    phase_s: dict[str, float] | None = json_field(None, omit_none=True,
                                                  doc="seconds by phase: start, load, build, warmup, measure, call "
                                                      "(the sweep's whole wait), close_previous")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class Knee:
    """Where the curve flattens."""

    metric: str = json_field("", always=True, doc="samples_per_s or sm_activity_percent")
    batch_size: int | None = json_field(None, always=True)
    value: float | None = json_field(None, always=True)
    peak_value: float | None = json_field(None, always=True)
    peak_batch_size: int | None = json_field(None, always=True)
    fraction_of_peak: float | None = json_field(None, always=True)
    growth_per_doubling_after: float | None = json_field(None, always=True)
    reason: str = json_field("", always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class MemoryEdge:
    """The largest size that fits, and a straight-line fit of peak memory against size."""

    largest_fit: int | None = json_field(None, always=True)
    smallest_oom: int | None = json_field(None, always=True)
    capacity_bytes: int | None = json_field(None, always=True)
    headroom: float = json_field(0.0, always=True)
    largest_fit_with_headroom: int | None = json_field(None, always=True)
    per_sample_bytes: float | None = json_field(None, always=True)
    fixed_bytes: float | None = json_field(None, always=True)
    estimated_max_batch_with_headroom: int | None = json_field(None, always=True)
    reason: str = json_field("", always=True)
    found: bool = json_field(False, always=True, doc="both a size that fit and one that ran out of memory")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class LatencyLimit:
    """The largest size within the p50 latency budget."""

    budget_s: float = json_field(0.0, always=True)
    largest_within: int | None = json_field(None, always=True)
    smallest_over: int | None = json_field(None, always=True)
    p50_at_largest_within_s: float | None = json_field(None, always=True)
    reason: str = json_field("", always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class PowerPoint:
    """Power against its limit at one size."""

    batch_size: int = json_field()
    power_w_mean: float | None = json_field(None, always=True)
    power_limit_w: float | None = json_field(None, always=True)
    fraction: float | None = json_field(None, always=True)
    verdict: str = json_field("", always=True, doc="at_limit, near_full, headroom or unknown")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class EdgePrediction:
    """The straight line through the measured peaks that the edge search jumped by."""

    batch_size: float = json_field(0.0, always=True, doc="the predicted largest size that fits (not rounded)")
    per_sample_bytes: float = json_field(0.0, always=True)
    fixed_bytes: float = json_field(0.0, always=True)
    limit_bytes: int = json_field(0, always=True, doc="the least free memory a trial started with")
    sizes: list[int] = json_field(default_factory=list, always=True, doc="the sizes the line goes through")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class SearchSummary:
    """How the sizes were searched and what it cost, in trials."""

    sizes_measured: int = json_field(0, always=True, doc="sizes whose throughput and latency were measured in full")
    sizes_probed: int = json_field(0, always=True,
                                   doc="fit probes past the knee: memory only, throughput not measured")
    sizes_failed: int = json_field(0, always=True, doc="sizes that ran out of memory or failed")
    edge_prediction: EdgePrediction | None = json_field(None, always=True,
                                                        doc="the first prediction of the memory edge; null: none "
                                                            "(no knee, no usable fit, or explicit sizes)")
    predict_edge: bool = json_field(True, always=True, doc="false: doubling in full to the first OOM, then midpoints")
    edge_resolution: float = json_field(0.0, always=True,
                                        doc="the edge search stops once the bracket is within this fraction of "
                                            "the size that fits")
    max_edge_trials: int = json_field(0, always=True, doc="the most sizes the edge search tries")
    edge_bound: int | None = json_field(None, omit_none=True,
                                        doc="the size the edge search took to run out of memory while none had (the "
                                            "device's capacity at 1/1.25 of the line's bytes a sample); no size "
                                            "above it was tried unless one at it fitted; absent: none was needed")
    prediction_low: bool | None = json_field(None, omit_none=True,
                                             doc="true: a size at or above the predicted edge fitted, and the search "
                                                 "then halved the gap toward the first OOM or the bound; absent "
                                                 "otherwise")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class SweepResults:
    """The headline answers of the curves."""

    knee: Knee = json_field(default_factory=Knee, always=True)
    knee_sm_activity: Knee | None = json_field(None, always=True, doc="null when SM activity was not measured")
    memory_edge: MemoryEdge = json_field(default_factory=MemoryEdge, always=True)
    latency: LatencyLimit | None = json_field(None, always=True, doc="null without a latency budget")
    power: list[PowerPoint] = json_field(default_factory=list, always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class Recommendation:
    """The batch size for one regime (offline: total hours; online: latency), and how to set it."""

    regime: str = json_field("", always=True, doc="offline or online")
    batch_size: int | None = json_field(None, always=True)
    text: str = json_field("", always=True)
    settings: dict[str, Any] = json_field(default_factory=dict, always=True)
    code: str | None = json_field(None, always=True)
    assumptions: list[str] = json_field(default_factory=list, always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class SweepReport:
    """A batch-size sweep: what `gpudoctor sweep` writes as JSON."""

    schema: str = json_field(SWEEP_SCHEMA, always=True)
    tool: Tool = json_field(default_factory=Tool, always=True)
    command: list[str] = json_field(default_factory=list, always=True)
    created_at: str = json_field("", always=True)
    duration_s: float = json_field(0.0, always=True)
    target: SweepTarget = json_field(default_factory=SweepTarget, always=True)
    device: dict[str, Any] = json_field(default_factory=dict, always=True, doc="type, name, index, uuid")
    environment: dict[str, Any] = json_field(default_factory=dict, always=True, doc="torch, cuda, driver, python")
    settings: SweepSettings = json_field(default_factory=SweepSettings, always=True)
    stop_reason: str = json_field("", always=True)
    failed: bool = json_field(False, always=True)
    interrupted: bool = json_field(False, always=True)
    search: SearchSummary | None = json_field(None, omit_none=True,
                                              doc="how the sizes were searched and what it cost; absent in older "
                                                  "reports")
    trials: list[SweepTrial] = json_field(default_factory=list, always=True, doc="ascending batch size")
    results: SweepResults = json_field(default_factory=SweepResults, always=True)
    recommendations: dict[str, Recommendation] = json_field(default_factory=dict, always=True,
                                                            doc="regime (offline, online) -> recommendation")
    observations: list[str] = json_field(default_factory=list, always=True)
    files: dict[str, str] = json_field(default_factory=dict, always=True, doc="kind -> file name, as written")
    extra: Mapping[str, Any] = extra_field()

    @classmethod
    def from_dict(cls, data: Any) -> SweepReport:
        return decode(cls, data)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = encode(self)
        return out

    @property
    def on_gpu(self) -> bool:
        return self.device.get("type") == "cuda"


def as_sweep(report: SweepReport | Mapping[str, Any]) -> SweepReport:
    """A SweepReport, from a SweepReport or from its JSON dict (NaN read as not measured)."""
    return report if isinstance(report, SweepReport) else SweepReport.from_dict(nulled_non_finite(report))
