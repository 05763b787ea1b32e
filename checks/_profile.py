"""What the kernel checks (GD301-GD304) share: the profile, when it holds GPU work."""

from __future__ import annotations

from gpudoctor.model import Skip
from gpudoctor.session import ProfileSummary, Session


def gpu_profile(session: Session) -> ProfileSummary:
    """The profile, or Skip when it holds no GPU activity ("not measured" is never a pass)."""
    profile = session.profile
    if profile is None:
        raise Skip(session.fact("profile") or "no profiler window was recorded")
    if profile.kernel_count == 0 and profile.gpu_busy_us <= 0:
        raise Skip(profile.error or "the profiler window holds no GPU activity")
    return profile
