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
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import ProfileSummary, Session

CheckFn = Callable[["Session"], Sequence[Finding]]

# the cap on a rule-based gain (GD301-GD303: span / unhidden time), defined once for the three
MAX_GAIN = Threshold("cap on the rule-based gain", 10.0, "x", "gpudoctor: an upper bound")

# what makes a window launch-bound (GD301's, and GD306's where it is not)
MIN_KERNELS = CountThreshold(
    "kernels in the window needed to judge", 100, "kernels",
    "gpudoctor: fewer give no distribution")
SHORT_SHARE = Threshold(
    "share of kernels shorter than their own launch", 0.5, "share",
    "Holistic Trace Analysis: a short kernel runs for less than its CPU launch; half of the "
    "work then drains faster than it is queued")
TINY_MEDIAN_US = Threshold(
    "median kernel below this: tiny", 10.0, "us",
    "Holistic Trace Analysis: a launch costs 5-20 us")
IDLE_WARNING = Threshold(
    "GPU idle share needed to look at all", 0.20, "share",
    "TensorBoard profiler plugin calls a GPU under 50% busy under-used")

LAUNCH_LIMITS = (MIN_KERNELS, SHORT_SHARE, TINY_MEDIAN_US, IDLE_WARNING)


@dataclasses.dataclass(frozen=True)
class LaunchSignals:
    """A window's tiny-kernel evidence and how idle its GPU was between its first and last work."""

    span_us: float
    idle_share: float
    short_share: float  # kernels shorter than their own launch call
    median_us: float | None  # the median kernel
    mean_launch_us: float | None  # the mean CPU time of a launch call

    @property
    def tiny(self) -> bool:
        median = self.median_us
        return (self.short_share >= SHORT_SHARE or (median is not None and median < TINY_MEDIAN_US)
                or (median is not None and self.mean_launch_us is not None and median < self.mean_launch_us))

    @property
    def launch_bound(self) -> bool:
        """Tiny kernels, and the GPU idle enough to look at: GD301's finding."""
        return self.tiny and self.idle_share >= IDLE_WARNING


def launch_signals(profile: ProfileSummary) -> LaunchSignals:
    """The window's launch-bound signals; Skip when it holds too few kernels to judge."""
    if profile.kernel_count < MIN_KERNELS:
        raise Skip(f"only {profile.kernel_count} kernels in the profiled window (need {MIN_KERNELS})")
    span = profile.gpu_busy_us + profile.gpu_idle_us
    if span <= 0:
        raise Skip("the GPU activity in the profile has no duration")
    return LaunchSignals(
        span_us=span, idle_share=profile.gpu_idle_us / span,
        short_share=profile.short_kernel_count / profile.kernel_count, median_us=profile.kernel_median_us,
        mean_launch_us=profile.launch_total_us / profile.launch_count if profile.launch_count else None)


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
