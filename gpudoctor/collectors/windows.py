"""The run's profiler windows, as the agent reported them, into `Session.profiles`.

Each window the agent kept (gpudoctor/agent/profiler.py: "start", then "phase" and
"later" ones) is summarised (collectors.trace) and replayed by the `replay` its caller hands
in (the assembly's gpudoctor.run.assemble.replay_window: the replay sits above the collectors). The
primary window, `Session.profile` as before, is the first one the run's own steps drove
(else the first one any steps drove; else the first: a run without steps). A window's
replay is calibrated to the step time measured outside it: the whole run's steady steps
for the primary window; for another one, the steps of the same source around it (its
phase); none when its steps came from another source or it had none.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor import metrics
from gpudoctor.session import ProfileSummary, ReplaySummary, Session

log = logging.getLogger(__name__)

# one window's replay: (trace events, its steps, their source, the steady steps outside it) -> its summary
Replayer = Callable[[Any, int, "str | None", "metrics.UnprofiledSteps | None"], "ReplaySummary | None"]

SOURCE_WORDS = {
    "explicit": "gpudoctor.step() steps", "optimizer": "optimizer steps", "backward": "backward() steps",
    "loader": "DataLoader batches", "forward": "module forwards", "time": "no step boundaries (time-bounded)",
}


def missing_dependency(exc: ImportError, what: str) -> str:
    """Why `what` cannot run, naming the package that is not installed and the fix (an
    install made without gpudoctor's dependencies, `pip install --no-deps`)."""
    package = (exc.name or "").split(".")[0]
    if not package or package == "gpudoctor":
        return f"{what} is not available in this build ({type(exc).__name__}: {exc})"
    return (f"{what} needs the Python package {package}, which is not installed here: pip install {package} "
            "(or reinstall gpudoctor with its dependencies)")


def apply_windows(profiles: list[dict[str, Any]], workdir: Path, session: Session, t0: float,
                  pid: int | None = None, *, replay: Replayer | None = None) -> str | None:
    """Fill `session.profile` and `session.profiles` from the windows of process `pid` (the
    primary rank of a distributed job; by default the first process that kept a window);
    the primary window's trace file name, or None. `replay` replays each window with GPU work
    (None: the windows are summarised only)."""
    usable = [p for p in profiles if p.get("path")]
    if not usable:
        session.unavailable["profile"] = _why_none(profiles, session)
        return None
    if pid is None or not any(p.get("pid") == pid for p in usable):
        pid = usable[0].get("pid")
    mine = sorted((p for p in usable if p.get("pid") == pid),
                  key=lambda p: (int(p.get("index") or 0), float(p.get("t_start") or 0)))
    try:
        from gpudoctor.collectors.trace import summarize_trace
        from gpudoctor.collectors.trace_decode import read_trace
    except ImportError as exc:
        session.unavailable["profile"] = missing_dependency(exc, "trace analysis")
        return None
    # the primary window is known from the agent's events (a window's step source is its event's), so each
    # trace is replayed as it is read and let go: a run's windows are never all held at once
    chosen = primary_index([_source(e) for e in mine], session.steps.source)
    read: list[tuple[ProfileSummary, str, int]] = []  # each window's summary, trace file and place in `mine`
    for n, event in enumerate(mine):
        try:
            data = read_trace(workdir / str(event["path"]), own_window=True)
            summary = summarize_trace(data, steps=int(event.get("steps") or 0))
            _describe(summary, event, t0, len(read) + 1)
            _relative_sites(summary, session.cwd)
        except Exception as exc:  # a trace we cannot read must not cost the rest of the report
            log.debug("trace analysis failed", exc_info=True)
            _unreadable(session, exc, last=not read and n == len(mine) - 1, index=event.get("index") or n + 1)
            continue
        if replay is not None and summary.kernel_count == 0 and summary.gpu_busy_us <= 0:
            summary.replay = ReplaySummary(steps=summary.steps, error="a CPU-only window: no GPU work to replay")
        elif replay is not None:
            primary = n == chosen and summary.step_source != "time"
            try:
                summary.replay = replay(data, summary.steps, summary.step_source,
                                        calibration_steps(session, summary, primary=primary))
            except Exception as exc:  # a replay that fails leaves the window's other numbers
                log.debug("replay failed", exc_info=True)
                summary.replay = ReplaySummary(steps=summary.steps, error=f"{type(exc).__name__}: {exc}")
        del data
        read.append((summary, str(event["path"]), n))
    if not read:
        return None
    # (the chosen window unreadable: the same rule over those that were read)
    at = next((k for k, (_, _, n) in enumerate(read) if n == chosen), None)
    if at is None:
        at = primary_index([summary.step_source for summary, _, _ in read], session.steps.source)
        if replay is not None:
            _replay_as_primary(read[at][0], workdir / read[at][1], session, replay)
    session.profiles = [summary for summary, _, _ in read]
    session.profile = read[at][0]
    session.unavailable.pop("profile", None)
    return read[at][1]


def _replay_as_primary(summary: ProfileSummary, path: Path, session: Session, replay: Replayer) -> None:
    """The window that stands in for an unreadable primary one: replayed again, calibrated to the
    whole run's steady steps as the primary window's replay is (it was replayed as a later one)."""
    if summary.replay is None or summary.replay.error is not None or summary.step_source == "time":
        return  # no replay to redo (a CPU-only window, a failed one), or none calibrated to steps
    try:
        from gpudoctor.collectors.trace_decode import read_trace

        summary.replay = replay(read_trace(path, own_window=True), summary.steps, summary.step_source,
                                calibration_steps(session, summary, primary=True))
    except Exception:  # the replay as a later window stands
        log.debug("replay of the stand-in primary window failed", exc_info=True)


def primary_index(sources: list[str | None], run_source: str | None) -> int:
    """Which of the windows (their step sources, in order) is the primary one: the first that the run's
    own steps drove (its step time is the run's, so is a replay calibrated to it), else the first that
    any steps drove, else the first. A window of another source that came first may have caught
    something else: an evaluation at step 0 under no_grad, with every library's first-call set-up in it
    (nanoGPT's train.py: cuDNN attention's first forward and backward, 0.58 and 0.72 s of a 1.6 s
    window), or a time-bounded window the set-up (data moved to the GPU before the loop began)."""
    own = next((k for k, source in enumerate(sources) if run_source is not None and source == run_source), None)
    if own is not None:
        return own
    return next((k for k, source in enumerate(sources) if source != "time"), 0)


def _source(event: dict[str, Any]) -> str | None:
    """A window event's step source ("optimizer", "time", ...), None when it has none."""
    return str(event["source"]) if event.get("source") else None


def _unreadable(session: Session, exc: Exception, *, last: bool, index: Any) -> None:
    """Say why a window's trace could not be analysed: as the profile's absence when it was the last hope."""
    why = f"the profiler trace could not be analysed: {type(exc).__name__}: {exc}"
    if last:
        session.unavailable["profile"] = why
    else:
        session.notes.append(f"profiler window {index}: {why}")


def rank_window(profiles: list[dict[str, Any]], workdir: Path, pid: int, t0: float,
                run_source: str | None = None) -> ProfileSummary | None:
    """One rank's window chosen as the primary rank's is (primary_index: the first of the run's own
    steps, `run_source`), summarised (no replay: the cross-rank checks read its totals and its
    communication kernels only)."""
    mine = sorted((p for p in profiles if p.get("path") and p.get("pid") == pid),
                  key=lambda p: (int(p.get("index") or 0), float(p.get("t_start") or 0)))
    if not mine:
        return None
    event = mine[primary_index([_source(p) for p in mine], run_source)]
    try:
        from gpudoctor.collectors.trace import summarize_trace
        from gpudoctor.collectors.trace_file import load_trace

        summary = summarize_trace(load_trace(workdir / str(event["path"]), own_window=True),
                                  steps=int(event.get("steps") or 0))
    except Exception:  # one rank's unreadable trace costs only its own row
        log.debug("rank trace analysis failed", exc_info=True)
        return None
    _describe(summary, event, t0, 1)
    # the call sites and hot spots stay with the primary window: a rank's row needs totals
    summary.call_sites, summary.top_cpu_ops, summary.sync_sites = [], [], []
    return summary


def _describe(summary: ProfileSummary, event: dict[str, Any], t0: float, index: int) -> None:
    summary.tf32_enabled = event.get("tf32")
    if event.get("cupti_detach") is not None:
        summary.cupti_detach = str(event["cupti_detach"])
        summary.cupti_detach_ms = float(event.get("cupti_detach_ms") or 0.0)
    if event.get("stacks") is not None:
        summary.stacks = bool(event["stacks"])
    if event.get("stop_s") is not None:
        summary.stop_s = float(event["stop_s"])
    counted = counted_step(event, t0)
    if counted is not None:
        summary.counted_start_s = round(counted[0], 3)
        summary.counted_calls, summary.stop_predicted_s = counted[2], counted[3]
    summary.window_s = round(float(event.get("t_end", 0)) - float(event.get("t_start", 0)), 3)
    if event.get("t_start") and event.get("t_end"):
        summary.window_start_s = round(float(event["t_start"]) - t0, 3)
        summary.window_end_s = round(float(event["t_end"]) - t0, 3)
    summary.label = str(event.get("label") or "start")
    summary.index = index
    summary.step_source = _source(event)
    summary.phase = phase_words(event)


def counted_step(event: dict[str, Any], t0: float) -> tuple[float, float, int, float] | None:
    """The step counted before a window (its event's `counted`, agent/profiler.StepCount): (its start in
    session seconds, its duration, its Python calls, the stop predicted with stacks); None where the event
    has none, or one this version cannot read."""
    counted = event.get("counted")
    if not isinstance(counted, dict):
        return None
    try:
        start, duration = float(counted["t_start"]) - t0, float(counted["duration_s"])
        calls, predicted = int(counted["calls"]), float(counted["stop_predicted_s"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if not all(math.isfinite(v) and v >= 0 for v in (duration, calls, predicted)) or not math.isfinite(start):
        return None
    return start, duration, calls, predicted


def _relative_sites(summary: ProfileSummary, cwd: str | None) -> None:
    """Call sites under the run's working directory, as the user knows them (train.py:12)."""
    if not cwd:
        return
    prefix = cwd.rstrip("/") + "/"
    for site in summary.call_sites:
        site.site = site.site.replace(f"({prefix}", "(")
    for sync in summary.sync_sites:
        if sync.site:
            sync.site = sync.site.replace(f"({prefix}", "(")


def phase_words(event: dict[str, Any]) -> str:
    """'optimizer steps, DataLoader 123:0, with gradients, on CUDA' from a window's phase."""
    source = str(event.get("source") or "")
    parts = [SOURCE_WORDS.get(source, source or "unknown steps")]
    if event.get("loader"):
        parts.append(f"DataLoader {event['loader']}")
    if event.get("grad") is not None:
        parts.append("with gradients" if event["grad"] else "without gradients")
    if event.get("cuda") is not None:
        parts.append("on CUDA" if event["cuda"] else "CPU only")
    return ", ".join(parts)


def calibration_steps(session: Session, summary: ProfileSummary, primary: bool) -> metrics.UnprofiledSteps | None:
    """The steady steps a window's replay is calibrated to: the whole run's for the primary window
    (the replay counts them in the window's trace where it counted another source), those of the
    same source around another one (its phase, before or after the primary); None when another
    window's steps came from another source."""
    if primary:
        return metrics.unprofiled(session)
    if summary.step_source != session.steps.source or summary.window_start_s is None or summary.window_end_s is None:
        return None
    return metrics.unprofiled_near(session, summary.window_start_s, summary.window_end_s)


def primary_calibration_steps(session: Session) -> metrics.UnprofiledSteps | None:
    """calibration_steps for the Session's primary window, as apply_windows chose them (the tools that
    replay a recorded window again: scripts/replay_fixture.py, benchmarks/corpus/repredict.py)."""
    profile = session.profile
    if profile is None:
        return None
    return calibration_steps(session, profile, primary=profile.step_source != "time")


def _why_none(profiles: list[dict[str, Any]], session: Session) -> str:
    errors = [str(p["error"]) for p in profiles if p.get("error")]
    if errors:
        return errors[0]
    if session.torch_cuda_used and "steps" in session.unavailable:
        return ("no step boundaries, and the run ended before the time-bounded window (--stepless-after after "
                "CUDA started, opened at the main thread's next module forward, tensor copy or sync); mark steps "
                "with gpudoctor.step()")
    if session.steps.source is not None:
        return "the profiler window did not complete (fewer steps than warm-up + window?)"
    if session.torch_cuda_used:
        return "the profiler window did not complete"
    return "no profiler window: the workload used no GPU and marked no steps"
