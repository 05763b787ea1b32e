"""One currency for every finding: the step time now, and the step time without its cause.

A finding's gain is ``step now / step predicted without the cause``, obtained by
the best method the Session allows, and said so:

- ``replay``: the profiled window replayed with the cause removed
  (gpudoctor.replay), calibrated to the unprofiled step time when it is known, with the
  steady time its steps do not stand for (an epoch's end and start) added unchanged to
  both sides;
- ``bound``: what the GPU allows. A host-side fix (data, syncs, launches, CPU)
  cannot make a step shorter than the time the GPU was busy in it, so its gain is
  at most ``1 / busy share`` of the steady steps (duty cycle, or SM activity where
  higher). When this bound is below the other estimate, it decides;
- ``rule``: the check's own arithmetic (``1 / (1 - data-wait share)``) when
  neither a replay nor GPU samples exist (CPU-only runs, analyze without steps).

Severity follows the gain: 1.053x or more is worth a finding (below it the change
is within run-to-run noise: the TensorBoard profiler plugin's 5% data-wait line
expressed as a gain), 1.43x or more (30% of the step) is critical.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.gpu_state import gpu_load

# the type of Finding.prediction lives with the Finding; imported from here by checks and plugins
from gpudoctor.model import Prediction as Prediction
from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:
    from gpudoctor.session import ReplaySummary, Session

GAIN_WARNING = Threshold(
    "predicted gain for a warning", 1.0 / (1.0 - 0.05), "x",
    "a 5% data wait removed, 1 / (1 - 0.05) (TensorBoard profiler plugin's line)")
GAIN_CRITICAL = Threshold(
    "predicted gain for a critical finding", 1.0 / (1.0 - 0.30), "x",
    "a 30% data wait removed, 1 / (1 - 0.30)")
MAX_GAIN = Threshold(
    "cap on any predicted gain", 100.0, "x",
    "gpudoctor: beyond it the prediction says nothing useful")

SEVERITY_GAINS = (GAIN_WARNING, GAIN_CRITICAL)  # what severity_for grades by, for the checks' pages


def severity_for(gain: float) -> str:
    if gain >= GAIN_CRITICAL:
        return "critical"
    return "warning" if gain >= GAIN_WARNING else "info"


def replay_of(session: Session) -> ReplaySummary | None:
    profile = session.profile
    replay = profile.replay if profile is not None else None
    return replay if replay is not None and replay.error is None and replay.baseline_span_us else None


def step_time_now(session: Session) -> float | None:
    """Mean steady step time outside the profiler window, else the replayed window's per-step time."""
    summary = metrics.step_summary(session)
    if summary is not None and summary.steps_per_s > 0:
        return 1.0 / summary.steps_per_s
    replay = replay_of(session)
    if replay is not None and replay.steps and replay.baseline_span_us:
        return replay.loop_us(replay.baseline_span_us) / (replay.run_steps or replay.steps) / 1e6
    return None


def unrepresented_per_step(session: Session) -> tuple[float, float]:
    """(seconds per step of the run that the profiled window's steps do not stand for, the data
    waits in them): periodic work (an epoch's end and start) that no what-if of the window
    changes (gpudoctor.replay.calibration); (0, 0) without a calibrated replay."""
    replay = replay_of(session)
    if replay is None or not replay.run_steps or replay.unrepresented_us <= 0:
        return 0.0, 0.0
    return replay.unrepresented_us / replay.run_steps / 1e6, replay.unrepresented_wait_us / replay.run_steps / 1e6


def host_side_bound(session: Session) -> tuple[float, str] | None:
    """(the most a host-side fix can gain, why), from the steady GPU samples."""
    load = gpu_load(session)
    if load is None or load.samples < 3:
        return None
    busy = load.busy_share
    if busy is None:
        return None
    cap = min(MAX_GAIN, 1.0 / max(busy, 1.0 / MAX_GAIN))
    what = "duty cycle" if load.duty_cycle is not None and busy * 100 == load.duty_cycle else "SM activity"
    return cap, (f"the GPU was busy {busy:.0%} of the steady steps ({what}): a host-side fix cannot shorten a "
                 f"step below that, so at most {cap:.2f}x")


def predict(session: Session, scenario: str, *, host_side: bool, rule_gain: float | None = None,
            rule_detail: str = "", label: str | None = None) -> Prediction | None:
    """The prediction for one cause; None when nothing can estimate it."""
    # the replay's scenarios are read here, not at import: `gpudoctor checks` and `explain` import
    # every check (and so this module) and never predict anything
    from gpudoctor.replay.scenarios import gain as replay_gain
    from gpudoctor.replay.scenarios import label as scenario_label

    label = label or scenario_label(scenario)
    replay = replay_of(session)
    gain = replay_gain(replay, scenario) if replay is not None else None
    if gain is not None and replay is not None:
        method = "replay"
        steps = f"{replay.steps} steps" if replay.steps else "the window"
        detail = f"replay of the profiled window ({steps}); {replay.calibration}"
        if replay.scope:
            detail += f"; replayed: {replay.scope}"
        scenario_row = next(s for s in replay.scenarios if s.name == scenario)
        if scenario_row.detail:
            detail += f"; {scenario_row.detail}"
        if (not host_side and metrics.host_ran_ahead(session) and replay.baseline_gpu_busy_us
                and scenario_row.gpu_busy_us > 0):
            # a cheaper GPU work, and the host queued its steps far ahead: a step takes as long as
            # its GPU work (the window's span also holds the backlog of the steps before it)
            gain = replay.loop_us(replay.baseline_gpu_busy_us) / replay.loop_us(scenario_row.gpu_busy_us)
            detail += (f"; the host ran ahead of the GPU, so a step takes its GPU time: "
                       f"{replay.baseline_gpu_busy_us / 1e3:.1f} ms -> {scenario_row.gpu_busy_us / 1e3:.1f} ms "
                       "of GPU work in the window")
    elif rule_gain is not None:
        method, gain, detail = "rule", rule_gain, rule_detail
    else:
        return None
    if host_side:
        bound = host_side_bound(session)
        if bound is not None and bound[0] < gain:
            gain, method, detail = bound[0], "bound", f"{bound[1]} (the {method} alone said {gain:.2f}x)"
    gain = max(1.0, min(MAX_GAIN, gain))
    now = step_time_now(session)
    return Prediction(gain=gain, method=method, label=label, detail=detail,
                      scenario=scenario if replay is not None and method != "rule" else None,
                      step_time_s=now, predicted_step_time_s=now / gain if now else None)


def bound_prediction(session: Session, gain: float, label: str, detail: str) -> Prediction:
    """A prediction from a bound the check computed itself (e.g. 1 / duty cycle)."""
    gain = max(1.0, min(MAX_GAIN, gain))
    now = step_time_now(session)
    return Prediction(gain=gain, method="bound", label=label, detail=detail, step_time_s=now,
                      predicted_step_time_s=now / gain if now else None)
