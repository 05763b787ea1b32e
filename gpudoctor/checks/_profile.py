"""What the kernel checks (GD301-GD304) share: the profile, when it holds GPU work, and
running a check on each profiled window of a run.

A run may have several windows (the start of steady state, an evaluation phase, a
later epoch: gpudoctor/agent/profiler.py). `per_window` runs a check on each, keeps
the finding of the primary window when it has one (else of the window where it is
worst), and says in the message which window it comes from and whether it held in
the others: "only in window 2 (phase: DataLoader batches, without gradients)".
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

# the windows' names and lengths, for the kernel checks that import them from here
from gpudoctor.analysis.windows import describe_window as describe_window
from gpudoctor.analysis.windows import window_name as window_name
from gpudoctor.analysis.windows import window_seconds as window_seconds
from gpudoctor.model import Finding, Skip
from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:
    from gpudoctor.session import ProfileSummary, Session

CheckFn = Callable[["Session"], Sequence[Finding]]

# the cap on a rule-based gain (GD301-GD303: span / unhidden time), defined once for the three
MAX_GAIN = Threshold("cap on the rule-based gain", 10.0, "x", "gpudoctor: an upper bound")


def gpu_profile(session: Session) -> ProfileSummary:
    """The profile, or Skip when it holds no GPU activity ("not measured" is never a pass)."""
    profile = session.profile
    if profile is None:
        raise Skip(session.fact("profile") or "no profiler window was recorded")
    if profile.kernel_count == 0 and profile.gpu_busy_us <= 0:
        raise Skip(profile.error or "the profiler window holds no GPU activity")
    return profile


def per_window(check: CheckFn) -> CheckFn:
    """Run `check` on every window; one window's findings, saying where they hold."""

    @functools.wraps(check)  # keeps the check's module, name and docstring
    def run(session: Session) -> list[Finding]:
        windows = session.windows()
        if len(windows) <= 1:
            return [_stamp(f, windows[0], "") if windows else f for f in check(session)]
        results: list[tuple[ProfileSummary, list[Finding] | None, str]] = []
        for window in windows:
            try:
                results.append((window, list(check(_view(session, window, primary=window is windows[0]))), ""))
            except Skip as skip:
                results.append((window, None, str(skip)))
        measured = [(w, found) for w, found, _ in results if found is not None]
        if not measured:
            raise Skip(results[0][2])
        holding = [(w, found) for w, found in measured if found]
        if not holding:
            return []
        chosen, found = holding[0] if holding[0][0] is windows[0] else max(
            holding, key=lambda wf: max(f.estimated_gain or 1.0 for f in wf[1]))
        also = [w for w, _ in holding if w is not chosen]
        not_in = [w for w, found in measured if not found]
        note = ""
        if not_in:
            note = (f" It holds only in {_names([chosen, *also])}, not in {_names(not_in)}: "
                    "a phase of the run, not all of it.")
        elif also:
            note = f" It holds in every profiled window ({_names([chosen, *also])})."
        return [_stamp(f, chosen, note) for f in found]

    return run


def _view(session: Session, window: ProfileSummary, primary: bool) -> Session:
    """The session as one window's check sees it. A later window whose steps came from
    another source (an evaluation loop's batches, in a run of optimizer steps) is not
    measured against the run's steps: its predictions use its own replayed step."""
    from gpudoctor.session import Steps  # loaded by then (the session is one); not at import, for `checks`

    if primary or window.step_source == session.steps.source:
        return dataclasses.replace(session, profile=window)
    return dataclasses.replace(session, profile=window, steps=Steps(source=window.step_source))


def _names(windows: Sequence[ProfileSummary]) -> str:
    parts = [f"window {w.index} ({w.label}{': ' + w.phase if w.phase else ''})" if w.index else "the window"
             for w in windows]
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]


def _stamp(finding: Finding, window: ProfileSummary, note: str) -> Finding:
    return dataclasses.replace(finding, message=finding.message + note,
                               window=describe_window(window) if window.index else finding.window)
