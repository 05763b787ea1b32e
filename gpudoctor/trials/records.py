"""What `--try` keeps in the Session: the overrides a run saw, and each trial's outcome.

The types are part of the session model and live in `gpudoctor.session` (the Session holds
them, and the collectors fill them in); this module names them for the trials code.
"""

from __future__ import annotations

from gpudoctor.session import AppliedOverride, TrialResult, Trials, Untried

__all__ = ["AppliedOverride", "TrialResult", "Trials", "Untried"]
