"""The session directory the agents write their events into, and the error for a run
that cannot start."""

from __future__ import annotations

import tempfile
from pathlib import Path


class LaunchError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def make_workdir(fallbacks: list[str]) -> Path:
    """The session directory: in the temporary directory, else in a fallback (the report
    directory), so a full or read-only /tmp does not stop the run."""
    errors = []
    for parent in [None, *fallbacks]:
        try:
            return Path(tempfile.mkdtemp(prefix="gpudoctor-session-" if parent is None else ".gpudoctor-session-",
                                         dir=parent))
        except OSError as exc:
            errors.append(f"{parent or tempfile.gettempdir()}: {exc.strerror or exc}")
    raise LaunchError("cannot create a session directory (" + "; ".join(errors) + ")", 73)
