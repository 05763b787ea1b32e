"""The replay beside the statistics: handed to a helper process when the window is long.

`gpudoctor analyze` of one long trace spends about as long replaying the window as on
all its statistics; both only read the decoded events. With a helper process running
(gpudoctor.run.analyze_helper, forked before the decode), the part of the window to replay is chosen
here (replay.window) and sent to it, and this process goes on with the statistics.
Otherwise the replay runs in this process when its result is asked for: the same code on
the same events, the same result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gpudoctor.collectors.trace_decode import TraceIndex
from gpudoctor.replay.scenarios import replay_or_error
from gpudoctor.replay.window import latest_stretch
from gpudoctor.session import ReplaySummary

PARALLEL_MIN_EVENTS = 150_000  # smaller traces replay in half a second or less: not worth the transfer


class Helper(Protocol):
    """What the replay asks of a helper process (gpudoctor.run.analyze_helper.Helper, one layer up)."""

    @property
    def active(self) -> bool: ...

    def replay(self, part: TraceIndex, steps: int) -> Callable[[], ReplaySummary | None]: ...


def start(index: TraceIndex, steps: int, helper: Helper | None = None) -> Callable[[], ReplaySummary | None]:
    """Begin replaying `index` (covering `steps` steps); call the result for the ReplaySummary."""
    events = len(index.gpu) + len(index.api) + len(index.ops) + len(index.frames)
    if helper is None or not helper.active or events < PARALLEL_MIN_EVENTS:
        return lambda: replay_or_error(index, steps)
    part = latest_stretch(index, steps)[0]
    return helper.replay(part, steps)
