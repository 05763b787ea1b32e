"""The torch.profiler window the agent recorded, turned into the Session's ProfileSummary
(or the reason there is none)."""

from __future__ import annotations

import logging
from pathlib import Path

from gpudoctor import metrics
from gpudoctor.session import Session

log = logging.getLogger(__name__)


def apply_profile(profiles: list[dict], workdir: Path, session: Session, t0: float) -> None:
    usable = [p for p in profiles if p.get("path")]
    if not usable:
        errors = [str(p["error"]) for p in profiles if p.get("error")]
        if errors:
            session.unavailable["profile"] = errors[0]
        elif session.torch_cuda_used and "steps" in session.unavailable:
            session.unavailable["profile"] = ("no step boundaries, and the run ended before the time-bounded "
                                              "window (--stepless-after after CUDA started); mark steps with "
                                              "gpudoctor.step()")
        elif session.torch_cuda_used:
            session.unavailable["profile"] = "the profiler window did not complete (fewer steps than warm-up + window?)"
        else:
            session.unavailable["profile"] = "no profiler window: the workload used no GPU"
        return
    profile = usable[0]
    try:
        from gpudoctor.collectors.trace import load_trace, summarize_trace, trace_events
        from gpudoctor.replay import replay_or_error
    except ImportError:
        session.unavailable["profile"] = "trace analysis is not available in this build"
        return
    try:
        data = load_trace(workdir / str(profile["path"]))
        summary = summarize_trace(data, steps=int(profile.get("steps") or 0))
        # the window replayed once per cause, calibrated to the steps outside it (gpudoctor.replay)
        summary.replay = replay_or_error(trace_events(data), summary.steps, *metrics.unprofiled_step_us(session))
    except Exception as exc:  # a trace we cannot read must not cost the rest of the report
        log.debug("trace analysis failed", exc_info=True)
        session.unavailable["profile"] = f"the profiler trace could not be analysed: {type(exc).__name__}: {exc}"
        return
    summary.tf32_enabled = profile.get("tf32")
    summary.window_s = round(float(profile.get("t_end", 0)) - float(profile.get("t_start", 0)), 3)
    if profile.get("t_start") and profile.get("t_end"):
        summary.window_start_s = round(float(profile["t_start"]) - t0, 3)
        summary.window_end_s = round(float(profile["t_end"]) - t0, 3)
    session.profile = summary
    session.unavailable.pop("profile", None)
