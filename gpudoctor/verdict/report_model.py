"""The report as typed data: schema ``gpudoctor.report/1``, the JSON contract (docs/architecture.md).

`gpudoctor.verdict.build.build_report` writes the report's JSON dict; `Report.from_dict` reads it
(or a saved report file) into these frozen dataclasses, refusing with one line what does
not fit; `Report.to_dict` writes it back, unchanged. Renderers take a `Report`.

The published JSON Schema (gpudoctor/schemas/report-v1.schema.json) is generated from
these classes by scripts/write_schemas.py; a test keeps the two equal.

The sections that are the Session's own data (environment, evidence) stay free JSON here:
their shape is the Session's (gpudoctor.session/1), documented there.

Adding an optional section (``ranks``, say): a field ``ranks: list[RankRecord] | None =
json_field(None, omit_none=True, doc=...)`` on `Report` (and its dataclass here), filled by
build_report; regenerate the schema. Reports without it keep their exact shape, and an
older gpudoctor keeps the key it does not know in `Report.extra`. Never mark a new key
``always``: reports of version 1 written before it must still fit the schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gpudoctor.base.jsonmodel import decode, encode, extra_field, json_field, nulled_non_finite
from gpudoctor.model import CheckStatus, Severity

REPORT_SCHEMA = "gpudoctor.report/1"
SCHEMA_ID = "https://gpudoctor.dev/schemas/report-v1.schema.json"
# far more than gpudoctor writes (at most 100 findings per check, a few dozen checks): a report
# claiming more is refused on load rather than decoded and rendered for minutes
MAX_FINDINGS = 5_000
MAX_CHECKS = 1_000


@dataclass(frozen=True)
class Tool:
    """The gpudoctor that wrote the report."""

    name: str = json_field("gpudoctor", always=True)
    version: str = json_field("", always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class EvidenceValue:
    """One measured value, with its unit and the window it covers."""

    value: Any = json_field(None, always=True, doc="the measured value; null when it could not be measured")
    unit: str | None = json_field(None, omit_none=True)
    window: str | None = json_field(None, omit_none=True, doc="e.g. 'steady steps 3-120', 'whole run'")
    label: str | None = json_field(None, omit_none=True, doc="human name for the report")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class RemedyRecord:
    """What to change: a sentence or two, and a copyable snippet."""

    text: str = json_field("", always=True)
    code: str | None = json_field(None, always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class BatchPoint:
    """Samples per second at `multiple` times the batch, over now."""

    multiple: float = json_field(1.0, always=True, minimum=0)
    gain: float = json_field(1.0, always=True, minimum=0)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class WorkerPoint:
    """The step's gain with `workers` DataLoader workers, over now."""

    workers: int = json_field(1, always=True, minimum=0)
    gain: float = json_field(1.0, always=True, minimum=0)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class PredictionRecord:
    """The step time now and predicted without the cause, and how that was obtained."""

    step_time_s: float | None = None
    predicted_step_time_s: float | None = None
    gain: float | None = None
    method: str | None = json_field(None, doc="replay | model | capacity ...")
    scenario: str | None = None
    label: str | None = json_field(None, doc="'if batches arrived instantly', ...")
    detail: str | None = None
    batch_multiple: float | None = json_field(None, omit_none=True,
                                              doc="a batch-size remedy: the multiple of the batch `gain` is for")
    batch_curve: list[BatchPoint] | None = json_field(
        None, omit_none=True, max_items=64,
        doc="a batch-size remedy: samples/s at each multiple of the batch over now (gpudoctor's model)")
    worker_curve: list[WorkerPoint] | None = json_field(
        None, omit_none=True, max_items=64,
        doc="a worker-count remedy: the gain with each num_workers from one more than now to the recommended, "
            "or where none is advised to the most the cores carry (under 1: a slowdown)")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True, kw_only=True)
class ReportFinding:
    """One finding, stamped by the engine; findings are ordered most important first."""

    json_label: ClassVar[str] = "finding"

    id: str = json_field(doc="the check's stable ID, e.g. GD102")
    stage: int = json_field(0, always=True,
                            doc="playbook stage: 0 the run, 1 input, 2 GPU/batch, 3 kernels, 4 memory, 5 multi-GPU")
    severity: Severity = json_field()
    title: str = json_field("", always=True)
    message: str = json_field("", always=True, doc="what was found, with the measured numbers")
    evidence: dict[str, EvidenceValue] = json_field(default_factory=dict, always=True)
    remedy: RemedyRecord | None = json_field(None, always=True)
    estimated_gain: float | None = json_field(None, always=True, minimum=0,
                                              doc="predicted speed-up (x) without the cause; null when unknown")
    slug: str | None = None
    prediction: PredictionRecord | None = None
    consequence_of: str | None = json_field(None, doc="the ID of the finding that explains this one")
    window: str | None = json_field(None, doc="the profiled window it comes from")
    trial: Any = json_field(None, omit_none=True, doc="--try: what the trial of this finding's remedy measured")
    extra: Mapping[str, Any] = extra_field()

    @property
    def is_root_cause(self) -> bool:
        return not self.consequence_of


@dataclass(frozen=True, kw_only=True)
class CheckRecord:
    """Every check's outcome: a skipped check is never silently a pass."""

    json_label: ClassVar[str] = "check"

    id: str = json_field()
    slug: str | None = None
    stage: int | None = None
    title: str | None = None
    status: CheckStatus = json_field()
    reason: str | None = json_field(None, doc="why it was skipped or failed")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class Summary:
    """The run's headline numbers and the verdict; null means not measured, never zero."""

    measured: bool | None = json_field(None, doc="the run reached something a diagnosis can stand on")
    stop_reason: str | None = None
    gpu_fully_used: bool | None = None
    gpu_load: str | None = None
    steps: int = json_field(0, minimum=0)
    step_source: str | None = None
    steady_steps: int = json_field(0, minimum=0)
    step_time_median_s: float | None = json_field(None, minimum=0)
    steps_per_s: float | None = json_field(None, minimum=0)
    samples_per_s: float | None = json_field(None, minimum=0)
    data_wait_share: float | None = json_field(None, minimum=0, doc="share of each step spent waiting for data, 0-1")
    gpu_util_mean: float | None = json_field(None, minimum=0, doc="NVML utilization (a duty cycle), %")
    sm_activity_mean: float | None = json_field(None, minimum=0, doc="real SM activity (GPM), %")
    tensor_activity_mean: float | None = json_field(None, minimum=0)
    power_w_mean: float | None = json_field(None, minimum=0)
    cpu_percent_mean: float | None = json_field(None, minimum=0)
    usable_cores: float | None = json_field(None, minimum=0)
    peak_memory_allocated_bytes: int | None = json_field(None, minimum=0)
    batch_size: int | None = json_field(None, minimum=0)
    crashed: bool | None = None
    profiler_overhead: Mapping[str, Any] | None = json_field(
        None, doc="what gpudoctor's profiler windows cost the run: throughput outside vs inside them, before vs "
                  "after the first one, workers forked inside one (gpudoctor/analysis/observer.py)")
    gpu_idle_by_cause_us: dict[str, float] | None = json_field(
        None, doc="the primary profiled window's GPU idle time by cause (data, sync, copies, optimizer, launch, "
                  "unexplained), us; the causes sum to evidence.profile.gpu_idle_us (the report's timeline)")
    verdict: str | None = None
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class RankRow:
    """One rank of a distributed job (gpudoctor/analysis/ranks.py): its steady numbers."""

    rank: int = json_field(0, always=True)
    host: str | None = json_field(None, always=True)
    pid: int | None = json_field(None, always=True)
    local_rank: int | None = json_field(None, always=True)
    backend: str | None = json_field(None, always=True, doc="the process group's backend: nccl, gloo, ...")
    steps: int = json_field(0, always=True)
    step_time_s: float | None = json_field(None, always=True, doc="median steady step")
    own_time_s: float | None = json_field(None, always=True, doc="median step time outside backward()")
    backward_s: float | None = json_field(None, always=True, doc="median time in backward()")
    data_wait_share: float | None = json_field(None, always=True)
    gpu_busy_percent: float | None = json_field(None, always=True)
    comm_share: float | None = json_field(None, always=True, doc="NCCL kernel time / step, profiled window")
    comm_overlap: float | None = json_field(None, always=True, doc="share of that time overlapped by compute")
    loader_workers: int | None = json_field(None, always=True)
    error: str | None = json_field(None, always=True)
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class RanksSection:
    """A distributed job's ranks: one row each, and the worst rank's step timeline."""

    world_size: int = json_field(0, always=True)
    recorded: int = json_field(0, always=True, doc="ranks recorded (a merged job: across its nodes)")
    job_id: str | None = json_field(None, always=True)
    primary_rank: int | None = json_field(None, always=True, doc="the rank the single-GPU checks judge")
    worst_rank: int | None = json_field(None, always=True)
    hosts: list[str] = json_field(default_factory=list, always=True)
    rows: list[RankRow] = json_field(default_factory=list, always=True)
    worst_timeline: Mapping[str, Any] = json_field(default_factory=dict, always=True,
                                                    doc="t, duration_s, data_wait_s, backward_s per step")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class Report:
    """A finished diagnosis: what `diagnose`, `analyze` and `report` write as JSON."""

    schema: str = json_field(REPORT_SCHEMA, always=True, doc="gpudoctor.report/<major>; fields are only ever added")
    tool: Tool = json_field(default_factory=Tool, always=True)
    command: list[str] = json_field(default_factory=list, always=True, doc="the workload's argv, secrets redacted")
    exit_code: int | None = json_field(None, always=True, doc="the workload's exit code")
    duration_s: float = json_field(0.0, always=True, minimum=0)
    environment: Mapping[str, Any] = json_field(default_factory=dict, always=True,
                                                doc="the Session's environment (gpudoctor.session/1)")
    summary: Summary = json_field(default_factory=Summary, always=True)
    findings: list[ReportFinding] = json_field(default_factory=list, always=True, max_items=MAX_FINDINGS,
                                               doc="most important first")
    checks: list[CheckRecord] = json_field(default_factory=list, always=True, max_items=MAX_CHECKS)
    started_at: str | None = json_field(None, doc="ISO 8601")
    stop_reason: str | None = json_field(None, doc="exited | duration | steps | interrupted | terminated")
    source: str | None = json_field(None, doc="diagnose | analyze | synthetic | fixture")
    files: dict[str, str] = json_field(default_factory=dict, doc="kind -> file name, beside the report")
    evidence: Mapping[str, Any] = json_field(default_factory=dict, doc="timeline, loaders, storage, profiles, "
                                             "hotspots, allocator, errors, processes, unavailable, notes")
    docs: dict[str, str] = json_field(default_factory=dict, doc="check ID -> its explain page")
    overrides: Any = json_field(None, doc="--try trial run: the overrides the workload saw")
    try_: Any = json_field(None, key="try", doc="--try: what was asked for")
    trials: list[Any] | None = json_field(None, doc="--try: one entry per trial run")
    untried: list[Any] | None = json_field(None, doc="--try: the findings not tried, and why")
    ranks: RanksSection | None = json_field(None, omit_none=True, doc="a distributed job: per-rank numbers")
    extra: Mapping[str, Any] = extra_field()

    @classmethod
    def from_dict(cls, data: Any) -> Report:
        """Decode parsed JSON; jsonmodel.DecodeError (one line) when it does not fit."""
        return decode(cls, data)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = encode(self)
        return out

    def root_causes(self) -> list[ReportFinding]:
        """Findings that are root causes (not consequences of another), in engine order."""
        return [f for f in self.findings if f.is_root_cause]


def as_report(report: Report | Mapping[str, Any]) -> Report:
    """A Report, from a Report or from a report dict built in this process (where an
    unmeasurable NaN becomes null, as the JSON writer has always written it)."""
    return report if isinstance(report, Report) else Report.from_dict(nulled_non_finite(report))
