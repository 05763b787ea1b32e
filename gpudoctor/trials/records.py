"""What `--try` keeps in the Session: the overrides a run saw, and each trial's outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AppliedOverride:
    """One override as the agent applied it inside the workload (an "override" event)."""

    name: (
        str  # num_workers | pin_memory | persistent_workers | prefetch_factor | tf32 | cudnn_benchmark | compile | env
    )
    value: Any = None  # what the workload got
    was: Any = None  # what the workload had asked for (None when not known)
    where: str | None = None  # "DataLoader(mod.Items)", "torch.backends.cudnn.benchmark", "held", ...
    applied: bool = True  # False: it could not apply here (see note)
    note: str | None = None  # why not, or "the workload set allow_tf32 = False; kept True"
    pid: int | None = None


@dataclass
class TrialResult:
    """One re-run of the workload with one remedy applied."""

    name: str  # the remedy: workers | pin_memory | tf32 | expandable_segments | compile | ...
    label: str  # what was changed, in words: "num_workers=8, persistent_workers=True"
    override: dict[str, Any] = field(default_factory=dict)  # as asked of the agent ("env" for variables)
    findings: list[str] = field(default_factory=list)  # the findings this remedies; the first sized it
    numerics_change: bool = False  # TF32, compile: results may differ in the last bits
    predicted_gain: float | None = None  # the first finding's prediction
    measured_gain: float | None = None  # steady steps/s with the remedy / without it
    steps_per_s: list[float | None] = field(default_factory=list)  # [without, with]
    steady_steps: list[int] = field(default_factory=list)  # [without, with]
    status: str = "measured"  # measured | inconclusive | not-measured | interrupted | failed
    why: str | None = None  # when not measured
    applied: list[AppliedOverride] = field(default_factory=list)  # what the workload really saw
    exit_code: int | None = None
    stop_reason: str | None = None
    duration_s: float = 0.0
    report: str | None = None  # the trial's JSON report, relative to the main report's folder
    verdict: str | None = None  # the trial run's own verdict
    remaining: list[str] = field(default_factory=list)  # finding IDs the trial run still had


@dataclass
class Untried:
    """A finding (or a remedy asked for by name) that no trial could test, and why."""

    subject: str  # GD302, or a remedy name such as "compile"
    why: str


@dataclass
class Trials:
    requested: list[str] = field(default_factory=list)  # --try: ["auto"]; --try-only: the names given
    bound: str = ""  # the bounds every run shared: "--steps 200", "--duration 60"
    results: list[TrialResult] = field(default_factory=list)
    untried: list[Untried] = field(default_factory=list)
