"""gpudoctor's own lines while the workload runs (gpudoctor.run.status)."""

from __future__ import annotations

import io

from gpudoctor.run.status import StatusLine


def test_without_a_terminal_a_heartbeat_line_every_30_s() -> None:
    """Issue 27, item 20: in a CI log nothing came out until the end of a long run."""
    stream = io.StringIO()  # not a terminal: no live line
    status = StatusLine(stream=stream, heartbeat_s=30.0)
    status.start()
    for elapsed in (0.5, 10.0, 29.9, 30.2, 45.0, 59.0, 61.0, 75.0):
        status.update(elapsed=elapsed, steps=int(elapsed * 10), data_wait=0.62, gpu_util=35.0)
    status.stop()
    assert stream.getvalue().splitlines() == [
        "gpudoctor: 30 s, 302 steps, data wait 62%, GPU util 35% (still running; Ctrl-C: stop and report)",
        "gpudoctor: 61 s, 610 steps, data wait 62%, GPU util 35% (still running; Ctrl-C: stop and report)",
    ]


def test_no_heartbeat_unless_asked_or_at_a_terminal() -> None:
    stream = io.StringIO()
    status = StatusLine(stream=stream)  # the in-process API's line: no heartbeat
    status.update(elapsed=100.0, steps=3, data_wait=None, gpu_util=None)
    assert stream.getvalue() == ""
    live = StatusLine(enabled=True, stream=io.StringIO(), heartbeat_s=30.0)
    assert live.heartbeat_s is None  # the live line says it already
