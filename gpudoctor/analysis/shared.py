"""The stage analyses several checks read, computed at most once per Session.

The input pipeline's stall (GD101-GD104, the trials), the GPU's activity and load
(GD201, GD202, the engine's severity cap) and the out-of-memory facts (GD202, GD402)
each take a pass over the Session's samples. The engine opens one ``Analyses`` for the
Session it judges (``shared_for``) and every check reads it through
``analyses(session)``: each analysis runs on first use and is kept for the rest of
that run. Outside an engine run (a unit test calling a check directly, a Session a
check derived for one profiled window) ``analyses`` gives a fresh, uncached-between-calls
one, so a Session changed between two calls is never read stale.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING

from gpudoctor.analysis.gpu_state import GpuActivity, GpuLoad, fully_used, gpu_activity
from gpudoctor.analysis.input_pipeline import InputStall, input_stall
from gpudoctor.analysis.memory import OomFacts, oom_facts, oom_seen

if TYPE_CHECKING:
    from gpudoctor.session import Session


class Analyses:
    """One Session's shared analyses, each computed on first use."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @cached_property
    def input_stall(self) -> InputStall | None:
        """The measured data wait (share, steady window, main loader, why batches are late)."""
        return input_stall(self.session)

    @cached_property
    def gpu_activity(self) -> GpuActivity | None:
        """Duty cycle, SM/tensor activity and memory use over the steady window."""
        return gpu_activity(self.session)

    @cached_property
    def fully_used(self) -> GpuLoad | None:
        """The GPU's load when it was fully used, else None."""
        return fully_used(self.session)

    @cached_property
    def oom(self) -> OomFacts | None:
        """What the out-of-memory errors and the allocator said about the failure, if any."""
        return oom_facts(self.session)

    @cached_property
    def oom_seen(self) -> bool:
        """An out-of-memory error, caught or not, anywhere in the run."""
        return oom_seen(self.session)


_lock = threading.Lock()
_open: dict[int, Analyses] = {}  # id(session) -> its Analyses, while an engine run judges it


@contextmanager
def shared_for(session: Session) -> Iterator[Analyses]:
    """Keep one Analyses for `session` while the block runs (nested blocks share the outer one)."""
    key = id(session)
    with _lock:
        current = _open.get(key)
        owner = current is None or current.session is not session
        if owner:
            current = _open[key] = Analyses(session)
    assert current is not None
    try:
        yield current
    finally:
        if owner:
            with _lock:
                _open.pop(key, None)


def analyses(session: Session) -> Analyses:
    """The Analyses the engine opened for this Session, else a new one."""
    current = _open.get(id(session))
    return current if current is not None and current.session is session else Analyses(session)
