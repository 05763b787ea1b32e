"""Whose SIGINT is it? Telling a keyboard Ctrl-C from a SIGINT sent to gpudoctor alone.

At a terminal the workload stays in gpudoctor's process group, so a Ctrl-C typed there
reaches both: gpudoctor must not send it again (a second SIGINT would cut the workload's
own clean-up short). A SIGINT sent to gpudoctor's pid alone (`kill -INT`, a scheduler)
reaches only gpudoctor: it must be forwarded, or the workload never hears of it.

Python's signal handlers do not say where a signal came from, but sigtimedwait does: a
signal the terminal generated carries si_code SI_KERNEL, one from kill() SI_USER. So at a
terminal SIGINT is blocked in gpudoctor's threads (after the workload started, so it does
not inherit the mask) and one thread waits for it. Where sigtimedwait does not exist the
caller keeps an ordinary handler and assumes a Ctrl-C came from the keyboard.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

SI_KERNEL = 0x80  # Linux: sent by the kernel (the terminal's line discipline for Ctrl-C)
_WAIT_S = 0.2


def foreground_tty() -> bool:
    """True when our stdin is a terminal and we are its foreground process group."""
    try:
        fd = sys.stdin.fileno()
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


class InterruptWatch:
    """Calls `on_interrupt(from_keyboard)` for each SIGINT, from a thread of its own.

    start() must run in the main thread before any other thread of gpudoctor starts
    (threads inherit the blocked mask; one that did not could take the signal)."""

    def __init__(self, on_interrupt: Callable[[bool], None]) -> None:
        self.on_interrupt = on_interrupt
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def supported() -> bool:
        return hasattr(signal, "sigtimedwait") and hasattr(signal, "pthread_sigmask")

    def start(self) -> bool:
        if not self.supported():
            return False
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        self._thread = threading.Thread(target=self._run, name="gpudoctor-sigint", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=2)
        try:
            while signal.sigtimedwait({signal.SIGINT}, 0) is not None:
                pass  # a SIGINT after the workload ended: nothing left to stop
        except OSError:
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                info = signal.sigtimedwait({signal.SIGINT}, _WAIT_S)
            except (OSError, InterruptedError):
                continue
            if info is None:
                continue
            try:
                self.on_interrupt(info.si_code == SI_KERNEL)
            except Exception:  # never let the watcher die: the next Ctrl-C must still work
                log.debug("interrupt handling failed", exc_info=True)
