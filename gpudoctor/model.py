"""The vocabulary shared by checks, the engine and the renderers."""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from gpudoctor.base.text import format_duration
from gpudoctor.thresholds import AnyThreshold, CountThreshold, Threshold, fill_page, thresholds_in  # noqa: F401

if TYPE_CHECKING:
    # for annotations only: the Session's dataclasses cost `gpudoctor checks` a sixth of its time
    from gpudoctor.session import Session

RunFn = Callable[["Session"], Sequence["Finding"]]

Severity = Literal["info", "warning", "critical"]  # in rising order
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
CheckStatus = Literal["pass", "finding", "skipped", "error"]
CHECK_STATUSES: tuple[CheckStatus, ...] = get_args(CheckStatus)

STAGES = {
    0: "the run itself",
    1: "input pipeline",
    2: "GPU use and batch size",
    3: "kernel efficiency",
    4: "memory",
    5: "multi-GPU",
}


def severity_rank(severity: str | None) -> int:
    """0 info, 1 warning, 2 critical; -1 for anything else (no severity, or an unknown one)."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


@dataclass(frozen=True)
class Fix:
    """How a check's remedy is tried and predicted, declared once on the check (``@check(fix=...)``):
    what `diagnose --try` (gpudoctor.trials.plan) and the report read instead of the check's ID.

        Fix("workers", sizes=True, scenarios=("data",))   # applied from outside: a trial re-runs with it
        Fix(untried="the copies are made by the code itself: ...", scenarios=("pinned",))

    A finding whose advice differs from its check's carries its own on ``Remedy.fix``.
    """

    # the remedy kind (gpudoctor.trials.remedies.KINDS) whose override applies it from outside the
    # code; None: no such override exists, and `untried` says why
    kind: str | None = None
    untried: str | None = None
    # its prediction is exactly the remedy's own (GD101's "with num_workers=8"): a trial shared by
    # several findings is checked against this one's prediction
    sizes: bool = False
    # the replay scenarios (gpudoctor.replay.scenarios.SCENARIOS) that predict its gain
    scenarios: tuple[str, ...] = ()
    # tried even when the run crashed (a memory remedy: the crash may be what it fixes)
    after_crash: bool = False


@dataclass(frozen=True)
class Remedy:
    text: str  # what to change, in a sentence or two
    code: str | None = None  # a copyable snippet
    # the settings it advises on, and which way ({"num_workers": "more" | "fewer" | "keep"}): findings
    # that disagree about one are reconciled by the engine before rendering (gpudoctor.verdict.engine.reconcile)
    knobs: Mapping[str, str] = field(default_factory=dict, compare=False)
    # what to advise instead when another finding's advice on one of `knobs` prevails
    without_knobs: Remedy | None = field(default=None, compare=False)
    # how this finding's advice is tried, where it differs from its check's `Check.fix` (GD103:
    # a loader producing batches in the main thread takes workers; full cores take none)
    fix: Fix | None = field(default=None, compare=False)


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
class Prediction:
    """What the step would cost without one cause, and how that was obtained
    (gpudoctor.analysis.prediction.predict makes them)."""

    gain: float  # step now / predicted step, >= 1 (a worker_curve point may be under 1: a slowdown)
    method: str  # replay | bound | rule
    label: str  # "if batches arrived instantly"
    detail: str  # how, in words (window, calibration, rates, the bound that applied)
    scenario: str | None = None  # the replay scenario, when one was used
    step_time_s: float | None = None  # steady step time now (unprofiled), when known
    predicted_step_time_s: float | None = None
    # a batch-size remedy: samples/s at m times the batch over now, (m, gain) rising in m
    # (gpudoctor.analysis.batch_scaling), and the multiple `gain` is for; the step times are then
    # per batch of today's size (step at m times the batch / m)
    batch_curve: tuple[tuple[float, float], ...] = ()
    batch_multiple: float | None = None
    # a worker-count remedy: (num_workers, gain) for each count the model was asked about, rising in
    # the count (gpudoctor.analysis.input_pipeline.worker_plan): a user who sets fewer workers than the
    # recommended count gets the model's number for that count, not the recommended count's
    worker_curve: tuple[tuple[int, float], ...] = ()

    def gain_with(self, workers: int) -> float | None:
        """The gain with `workers` workers from `worker_curve` (linear between its counts, flat past the
        last: more workers than the load needs buy nothing more); None without a curve or below its
        first count (no more workers than now)."""
        if not self.worker_curve or workers < self.worker_curve[0][0]:
            return None
        for (w0, g0), (w1, g1) in itertools.pairwise(self.worker_curve):
            if w0 <= workers <= w1:
                return float(g0 + (g1 - g0) * (workers - w0) / (w1 - w0))
        return float(self.worker_curve[-1][1])

    def gain_at(self, multiple: float) -> float | None:
        """The gain at `multiple` times the batch from `batch_curve` (geometric between its points,
        from 1x at today's batch, flat past the last point); None without a curve or below 1x."""
        if not self.batch_curve or multiple < 1:
            return None
        points = [(1.0, 1.0), *sorted(self.batch_curve)]
        for (m0, g0), (m1, g1) in itertools.pairwise(points):
            if m0 <= multiple <= m1 and m1 > m0:
                t = math.log(multiple / m0) / math.log(m1 / m0)
                return float(g0 * (g1 / g0) ** t) if g0 > 0 and g1 > 0 else g0 + (g1 - g0) * t
        return float(points[-1][1])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "step_time_s": _round6(self.step_time_s),
            "predicted_step_time_s": _round6(self.predicted_step_time_s),
            "gain": round(self.gain, 3),
            "method": self.method,
            "scenario": self.scenario,
            "label": self.label,
            "detail": self.detail,
        }
        if self.batch_curve:
            out["batch_multiple"] = self.batch_multiple
            out["batch_curve"] = [{"multiple": m, "gain": round(g, 3)} for m, g in self.batch_curve]
        if self.worker_curve:
            out["worker_curve"] = [{"workers": w, "gain": round(g, 3)} for w, g in self.worker_curve]
        return out

    def sentence(self) -> str:
        """'step 15.2 ms now, 15.0 ms predicted if batches arrived instantly (replay)'."""
        if self.step_time_s is not None and self.predicted_step_time_s is not None:
            return (f"step {format_duration(self.step_time_s)} now, "
                    f"{format_duration(self.predicted_step_time_s)} predicted {self.label} "
                    f"({self.gain:.2f}x, {self.method})")
        return f"{self.gain:.2f}x predicted {self.label} ({self.method})"


def _round6(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


@dataclass(frozen=True)
class Finding:
    """What a check found. The engine stamps `id`, `stage` and the ordering."""

    severity: str  # a Severity: info | warning | critical (checked below)
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
    # set by the engine when a --try trial measured its remedy under 1.05x (gpudoctor.verdict.gains):
    # what it measured, and with which change; the finding then ranks by it, never critical
    measured_gain: float | None = None
    measured_with: str | None = None

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
    # a condition on one of `explains`: the relation holds only when it is true of that finding
    # (GD102 explains GD103 only when the saturated core is the main thread, the loader itself)
    explains_only_if: Mapping[str, Callable[[Finding], bool]] = field(default_factory=dict, hash=False,
                                                                      compare=False)
    # limits from shared analyses the check relies on without naming them in its module; with the
    # Threshold constants bound in its module, they are what `gpudoctor explain` prints (thresholds_of)
    thresholds: tuple[AnyThreshold, ...] = ()
    # its findings are the GPU's idle time itself (GD201): in a replayed window, a cause explains
    # them when removing that cause takes away at least half of the idle time (gpudoctor.verdict.engine)
    measures_idle: bool = False
    # the main question it answers ("data wait": is the loop waiting for data; "GPU activity": is
    # the GPU busy). When it could not run, the verdict says this is unknown instead of "no
    # bottleneck found" (gpudoctor.verdict.build). `decides_on_gpu_runs`: only on runs that used CUDA.
    decides: str | None = None
    decides_on_gpu_runs: bool = False
    # the settings (Remedy.knobs) it sizes from the run's measurements: where findings disagree about
    # one, this check's advice prevails (GD101 owns num_workers)
    owns: tuple[str, ...] = ()
    # how its remedy is tried (`diagnose --try`) and predicted (the replay); None: no remedy
    # gpudoctor can apply from outside the code is known for it
    fix: Fix | None = None
    # its findings are the loop waiting for data in one form (workers, stall, CPU, storage): when
    # one leads, the verdict gives the measured data wait rather than its title (gpudoctor.verdict.build)
    data_wait: bool = False
    # its findings are the run's failure itself (a crash, a kill, a hang, a non-zero exit): where
    # the job failed, `preflight`'s exit item quotes the first one's title (gpudoctor.preflight.job)
    run_failure: bool = False


def check(id: str, slug: str, *, stage: int, title: str, requires: Sequence[str] = (),
          explains: Sequence[str] = (), explains_only_if: Mapping[str, Callable[[Finding], bool]] | None = None,
          thresholds: Sequence[AnyThreshold] = (), measures_idle: bool = False, decides: str | None = None,
          decides_on_gpu_runs: bool = False, owns: Sequence[str] = (), fix: Fix | None = None,
          data_wait: bool = False, run_failure: bool = False) -> Callable[[RunFn], RunFn]:
    """Declare a check once, on its function; the module docstring is its page, where
    ``{{NAME}}`` stands for the value of threshold NAME (gpudoctor.thresholds.fill_page).

        @check("GD102", "input-stall", stage=1, title="Input pipeline stall", requires=("loader",))
        def run(session: Session) -> list[Finding]: ...

    The function stays a plain function of a Session (tests call it directly); the
    declaration is `run.check`, which the registry finds in every module of gpudoctor.checks.
    """

    def declare(run: RunFn) -> RunFn:
        module = sys.modules.get(run.__module__)
        page = fill_page(module.__doc__ or "", vars(module), thresholds) if module is not None else ""
        declared = Check(id=id, slug=slug, stage=stage, title=title, run=run, requires=tuple(requires),
                         doc=page, explains=tuple(explains),
                         explains_only_if=dict(explains_only_if or {}), thresholds=tuple(thresholds),
                         measures_idle=measures_idle, decides=decides, decides_on_gpu_runs=decides_on_gpu_runs,
                         owns=tuple(owns), fix=fix, data_wait=data_wait, run_failure=run_failure)
        run.check = declared  # type: ignore[attr-defined]
        return run

    return declare


def declared_check(obj: object) -> Check | None:
    """The Check an object declares: itself, or the one `@check` put on a function."""
    if isinstance(obj, Check):
        return obj
    found = getattr(obj, "check", None) if callable(obj) else None
    return found if isinstance(found, Check) else None


def thresholds_of(declared: Check) -> tuple[AnyThreshold, ...]:
    """The limits a check compares against: those it declares (the shared analyses' limits
    it relies on), then the Threshold constants bound in the module of its function."""
    module = sys.modules.get(getattr(declared.run, "__module__", "") or "")
    bound = thresholds_in(vars(module)) if module is not None else ()
    seen: dict[int, AnyThreshold] = {}
    for limit in (*declared.thresholds, *bound):
        seen.setdefault(id(limit), limit)
    return tuple(seen.values())


@dataclass(frozen=True)
class CheckOutcome:
    id: str
    slug: str
    stage: int
    title: str
    status: str  # a CheckStatus: pass | finding | skipped | error
    reason: str | None = None
    decides: str | None = None  # the main question it answers on this run (Check.decides), if any
