"""The vocabulary shared by checks, the engine and the renderers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpudoctor.session import Session

if TYPE_CHECKING:
    from gpudoctor.analysis.prediction import Prediction

SEVERITIES = ("info", "warning", "critical")

STAGES = {
    0: "the run itself",
    1: "input pipeline",
    2: "GPU use and batch size",
    3: "kernel efficiency",
    4: "memory",
    5: "multi-GPU",
}


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


@dataclass(frozen=True)
class Remedy:
    text: str  # what to change, in a sentence or two
    code: str | None = None  # a copyable snippet


@dataclass(frozen=True)
class Evidence:
    """One measured value, with its unit and the window it covers."""

    value: Any
    unit: str | None = None
    window: str | None = None  # e.g. "steady steps 3-120", "whole run"
    label: str | None = None  # human name for the report

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value}
        if self.unit:
            out["unit"] = self.unit
        if self.window:
            out["window"] = self.window
        if self.label:
            out["label"] = self.label
        return out


@dataclass(frozen=True)
class Finding:
    """What a check found. The engine stamps `id`, `stage` and the ordering."""

    severity: str  # info | warning | critical
    title: str
    message: str  # with the measured numbers
    evidence: dict[str, Evidence] = field(default_factory=dict)
    remedy: Remedy | None = None
    estimated_gain: float | None = None  # predicted speed-up (x) without the cause, None when unknown
    # the step time now and predicted without the cause, and how that was obtained
    prediction: Prediction | None = None
    # this is why the run stopped (an uncaught OOM, say): ranked first, with GD001's stage
    ended_run: bool = False
    id: str = ""
    stage: int = 0
    # set by the engine when another finding explains this one
    consequence_of: str | None = None
    # the profiled window it comes from, when it comes from one ("profiled window 2 (phase, ...)")
    window: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if self.prediction is not None and self.estimated_gain is None:
            object.__setattr__(self, "estimated_gain", self.prediction.gain)


class Skip(Exception):
    """Raised by a check that cannot run on this Session; the message is the reason."""


@dataclass(frozen=True)
class Check:
    """A check: stable ID and slug, playbook stage, and a pure function of a Session."""

    id: str  # GD102
    slug: str  # input-stall
    stage: int
    title: str
    run: Callable[[Session], Sequence[Finding]]
    requires: tuple[str, ...] = ()  # Session facts (keys of Session.unavailable)
    doc: str = ""  # the module docstring: what `gpudoctor explain` prints
    # checks whose findings this one's explains, where no replay of the window can tell
    # (a starved loader explains an idle GPU; an OOM explains allocation retries)
    explains: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckOutcome:
    id: str
    slug: str
    stage: int
    title: str
    status: str  # pass | finding | skipped | error
    reason: str | None = None
