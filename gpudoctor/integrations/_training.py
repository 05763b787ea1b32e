"""What the framework callbacks share: one watch from train start to train end, steps marked.

The callbacks only translate their framework's events into `begin`, `step` and `end`.
A run that dies with an uncaught exception still gets its report: while the watch
runs, a chained ``sys.excepthook`` ends it (recording the crash), and an ``atexit``
handler ends a watch that nothing else ended. A notebook, where exceptions never reach
sys.excepthook, ends a stale watch when training starts again (or call ``close()``).
"""

from __future__ import annotations

import atexit
import logging
import sys
from types import TracebackType
from typing import Any

from gpudoctor.inprocess.result import Report
from gpudoctor.inprocess.watch import Watch

log = logging.getLogger(__name__)


class TrainingWatch:
    def __init__(self, name: str, *, out: str | None, steps: int | None, verbose: bool,
                 options: dict[str, Any]) -> None:
        self.name = name
        self.out = out
        self.max_steps = steps
        self.verbose = verbose
        self.options = options
        self.watch: Watch | None = None
        self.report: Report | None = None
        self.files: dict[str, Any] = {}
        self.steps = 0
        self._previous_hook: Any = None

    def begin(self, out: str | None = None) -> None:
        """Training starts: a fresh watch (a stale one from a failed run is ended first)."""
        try:
            self.end()
            self.steps = 0
            self.watch = Watch(self.name, out=out if self.out is None else self.out, **self.options).start()
            if not self.watch.running:
                return
            self._previous_hook = sys.excepthook
            sys.excepthook = self._on_uncaught
            atexit.register(self.end)
        except Exception as exc:  # never into the training loop
            log.warning("gpudoctor: the callback could not start watching: %s", exc, exc_info=True)

    def step(self) -> None:
        watch = self.watch
        if watch is None or not watch.running:
            return
        watch.step()
        self.steps += 1
        if self.max_steps is not None and self.steps >= self.max_steps:
            self.end()  # enough watched: the rest of the training runs unobserved

    def end(self, exc_type: type[BaseException] | None = None, exc: BaseException | None = None,
            tb: TracebackType | None = None) -> None:
        """Training ended (or failed): build and write the report. Idempotent, never raises."""
        watch, self.watch = self.watch, None
        if watch is None:
            return
        try:
            atexit.unregister(self.end)
            if sys.excepthook == self._on_uncaught:
                sys.excepthook = self._previous_hook
            if watch.running:
                watch.__exit__(exc_type, exc, tb)
            self.report = watch.report()
            self.files = dict(watch.files)
            if self.verbose and self.report is not None:
                where = self.files.get("html")
                _say(f"gpudoctor: {self.report.verdict}" + (f" Report: {where}" if where else ""))
            elif self.verbose and watch.error:
                _say(f"gpudoctor: no report: {watch.error}")
        except Exception as error:
            log.warning("gpudoctor: the callback could not finish the report: %s", error, exc_info=True)

    def _on_uncaught(self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        previous = self._previous_hook or sys.__excepthook__
        self.end(exc_type, exc, tb)
        previous(exc_type, exc, tb)


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass
