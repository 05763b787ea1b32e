"""The before/after comparison as typed data: schema ``gpudoctor.diff/1``.

`gpudoctor.diff.compare.compare` builds a `Diff` from two reports; its renderers
(gpudoctor.reports.diff_text, diff_html) read it; `Diff.to_dict` is its JSON, through the
same codec as the report (gpudoctor.base.jsonmodel). Fields are only ever added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from gpudoctor.base.jsonmodel import decode, encode, extra_field, json_field, nulled_non_finite
from gpudoctor.model import Severity
from gpudoctor.verdict.report_model import Tool

DIFF_SCHEMA = "gpudoctor.diff/1"

# better/worse: moved beyond the metric's noise; unchanged: within it; changed: moved, but
# neither good nor bad by itself; the last two: a timing move the samples cannot back
MetricVerdict = Literal["better", "worse", "unchanged", "changed", "not measured", "within noise", "too few steps"]


@dataclass(frozen=True)
class DiffSide:
    """One run of the comparison."""

    file: str | None = None
    command: list[str] = field(default_factory=list)
    workload: str | None = json_field(None, doc="script:train.py, module:pkg.train, command:NAME")
    gpus: list[str] = field(default_factory=list)
    started_at: str | None = None
    duration_s: float | None = None
    exit_code: int | None = None
    verdict: str | None = None
    tool_version: str | None = None
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class Comparable:
    """Why the two runs are not a fair A/B (empty: they are), and whether --force overrode it."""

    reasons: list[str] = field(default_factory=list)
    forced: bool = False
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class Speedup:
    """End-to-end speed-up, after over before; null when the runs do not compare."""

    value: float | None = None
    basis: Literal["samples/s", "steps/s"] | None = None
    note: str | None = None
    significant: bool | None = json_field(None, doc="the step times' 95% intervals do not overlap")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class StepStats:
    """One side's steady steps: how many, their throughput with its spread, and the spread of their times."""

    steady_steps: int = 0
    median_s: float | None = None
    p25_s: float | None = None
    p75_s: float | None = None
    iqr_s: float | None = None
    median_ci95_s: list[float] | None = json_field(None, doc="95% interval of the median, [low, high]")
    steps_per_s: float | None = json_field(None, doc="steady steps / their total time")
    steps_per_s_ci95: list[float] | None = json_field(
        None, doc="95% interval of the mean rate of consecutive windows of steps, [low, high]")
    windows: int = json_field(0, doc="windows the throughput's interval comes from")
    window_steps: int | None = json_field(None, doc="steps per window")
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class Samples:
    """Both sides' samples, and whether the throughput difference stands out of the noise."""

    before: StepStats = field(default_factory=StepStats)
    after: StepStats = field(default_factory=StepStats)
    significant: bool = False
    reason: str | None = None
    min_steady_steps: int = 0
    basis: str | None = json_field(None, doc="what decided: throughput (windows' intervals) or median (step time)")
    median_significant: bool = json_field(False, doc="the median step times' 95% intervals are apart")
    extra: Mapping[str, Any] = extra_field()

    @classmethod
    def from_stats(cls, before: Mapping[str, Any], after: Mapping[str, Any],
                   significance: Mapping[str, Any]) -> Samples:
        """From diff_stats.step_time_stats (each side) and diff_stats.significance."""
        return decode(cls, {"before": before, "after": after, **significance})


@dataclass(frozen=True)
class MetricChange:
    """One summary number, before and after."""

    key: str = json_field(doc="the report summary's key")
    label: str = ""
    unit: str | None = None
    before: float | None = None
    after: float | None = None
    change: float | None = None
    relative_change: float | None = None
    verdict: MetricVerdict = "not measured"
    extra: Mapping[str, Any] = extra_field()


@dataclass(frozen=True)
class FindingChange:
    """A finding on one side or both, by ID."""

    id: str = json_field()
    title: str | None = None
    severity_before: Severity | None = None
    severity_after: Severity | None = None
    consequence_of: str | None = None
    extra: Mapping[str, Any] = extra_field()

    def severity_text(self) -> str:
        """'critical -> warning' when it changed, else the one severity."""
        if self.severity_before and self.severity_after and self.severity_before != self.severity_after:
            return f"{self.severity_before} -> {self.severity_after}"
        return str(self.severity_after or self.severity_before)


@dataclass(frozen=True)
class FindingChanges:
    """resolved: before only; new: after only; changed: both, another severity; unchanged: both, same."""

    resolved: list[FindingChange] = field(default_factory=list)
    new: list[FindingChange] = field(default_factory=list)
    changed: list[FindingChange] = field(default_factory=list)
    unchanged: list[FindingChange] = field(default_factory=list)
    extra: Mapping[str, Any] = extra_field()

    GROUPS: ClassVar[tuple[str, ...]] = ("resolved", "new", "changed", "unchanged")

    def group(self, name: str) -> list[FindingChange]:
        items: list[FindingChange] = getattr(self, name)
        return items


@dataclass(frozen=True)
class Diff:
    """A before/after comparison of two runs: what `gpudoctor diff` writes as JSON."""

    schema: str = json_field(DIFF_SCHEMA, always=True)
    tool: Tool = field(default_factory=Tool)
    before: DiffSide = json_field(default_factory=DiffSide, always=True)
    after: DiffSide = json_field(default_factory=DiffSide, always=True)
    comparable: Comparable = field(default_factory=Comparable)
    speedup: Speedup = json_field(default_factory=Speedup, always=True)
    samples: Samples = field(default_factory=Samples)
    metrics: list[MetricChange] = json_field(default_factory=list, always=True)
    findings: FindingChanges = json_field(default_factory=FindingChanges, always=True)
    timelines: Mapping[str, Any] = json_field(default_factory=dict, doc="each side's report timeline, for the chart")
    verdict: str = json_field("", always=True)
    extra: Mapping[str, Any] = extra_field()

    @classmethod
    def from_dict(cls, data: Any) -> Diff:
        return decode(cls, data)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = encode(self)
        return out


def as_diff(diff: Diff | Mapping[str, Any]) -> Diff:
    """A Diff, from a Diff or from its JSON dict (NaN read as not measured)."""
    return diff if isinstance(diff, Diff) else Diff.from_dict(nulled_non_finite(diff))
