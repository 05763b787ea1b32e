"""The replay beside the statistics: a second core replays while the first computes them.

`gpudoctor analyze` of one long trace spends about as long replaying the window as on
all its statistics; both only read the decoded events. On Linux, with a second usable
core and a trace large enough to pay for it, the part of the window to replay is chosen
here (replay.window) and a forked child replays it while this process goes on. The child
reads only those events (copy-on-write keeps the rest shared), sends back the
ReplaySummary and exits. Anywhere else, or when the child cannot start, the replay runs in
this process when its result is asked for: the same code on the same events, the same result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gpudoctor import forking
from gpudoctor.collectors.trace_decode import TraceIndex
from gpudoctor.replay.scenarios import replay_or_error
from gpudoctor.replay.window import latest_stretch
from gpudoctor.session import ReplaySummary

log = logging.getLogger(__name__)

PARALLEL_MIN_EVENTS = 150_000  # smaller traces replay in half a second or less: not worth a process


def start(index: TraceIndex, steps: int, *, parallel: bool = True) -> Callable[[], ReplaySummary | None]:
    """Begin replaying `index` (covering `steps` steps); call the result for the ReplaySummary."""
    events = len(index.gpu) + len(index.api) + len(index.ops) + len(index.frames)
    if not parallel or events < PARALLEL_MIN_EVENTS or not forking.spare_core():
        return lambda: replay_or_error(index, steps)
    part = latest_stretch(index, steps)[0]  # chosen here: the child touches only the events it replays
    try:
        receive, send = forking.pipe(duplex=False)
        child = forking.start_child(_replay_and_send, (part, steps, send), "gpudoctor-replay")
    except (OSError, ValueError) as exc:
        log.debug("replay in this process: %s", exc)
        return lambda: replay_or_error(part, steps)
    send.close()

    def result() -> ReplaySummary | None:
        summary: Any = None
        try:
            summary = receive.recv()
        except (EOFError, OSError):
            child.join()
            return ReplaySummary(steps=steps, error=f"the replay's process ended without a result "
                                                    f"(exit code {child.exitcode})")
        finally:
            receive.close()
            child.join()
        return summary if isinstance(summary, ReplaySummary) else None

    return result


def _replay_and_send(part: TraceIndex, steps: int, send: Any) -> None:
    send.send(replay_or_error(part, steps))
    send.close()

