"""The agent's record of an uncaught exception survives a signal handler raising into it."""

from __future__ import annotations

import traceback

from gpudoctor.agent import _format_exception


def test_a_signal_handler_raising_while_formatting_does_not_lose_the_traceback(monkeypatch):
    # seen on a 2-core box: torch's SIGCHLD handler raised "DataLoader worker ... is killed by
    # signal" while the loop's ConnectionResetError was being formatted, and the traceback was lost
    real = traceback.format_exception
    calls = []

    def interrupted_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("DataLoader worker (pid 42) is killed by signal: Killed.")
        return real(*args, **kwargs)

    monkeypatch.setattr(traceback, "format_exception", interrupted_once)
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError as exc:
        text = _format_exception(type(exc), exc, exc.__traceback__)
    assert text is not None and "ConnectionResetError" in text and "test_exception_record.py" in text
    assert "is killed by signal: Killed" in text
