"""GD001 and a stop gpudoctor asked for: what the stop became is the stop, not a crash (issue 27 item 6)."""

from __future__ import annotations

import pytest
from helpers import make_session, make_steps

from gpudoctor.checks.gd001_run_failed import run as gd001
from gpudoctor.session import ErrorEvent

SIGNAL_EXCEPTION = "torch.distributed.elastic.multiprocessing.api.SignalException"


def _stopped(error_at: float, reason: str = "duration"):
    session = make_session(steps=make_steps(30, 0.1))
    session.stop_reason, session.stop_requested_s, session.exit_code = reason, 3.1, 1  # steps end at 3.0 s
    session.errors = [ErrorEvent(pid=1, kind="exception", type=SIGNAL_EXCEPTION, message="got signal: 2",
                                 t=error_at)]
    return session


@pytest.mark.parametrize("reason", ["duration", "steps"])
def test_an_exception_raised_after_the_stop_is_the_stop(reason):
    session = _stopped(3.3, reason)
    assert session.crashes_before_stop() == []
    assert [f.title for f in gd001(session)] == []


def test_a_crash_before_the_stop_is_still_a_crash():
    session = _stopped(1.0)
    findings = gd001(session)
    assert len(findings) == 1 and findings[0].severity == "critical" and "SignalException" in findings[0].title


def test_a_run_that_was_not_stopped_keeps_every_crash():
    session = _stopped(3.3, "exited")
    assert len(session.crashes_before_stop()) == 1
    assert gd001(session)[0].severity == "critical"
