"""gpudoctor's own lines on stderr while the workload runs: `say` for a message, and the
live one-line status.

At a terminal the workload shares it, so the status lives on the bottom row inside a
scroll region that the workload's output scrolls above (as apt's progress bar does):
its output is never overwritten. Without a terminal (a pipe, a CI log) a plain
heartbeat line takes its place every `heartbeat_s` (30 s), so a long run is never
silent until its end.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from typing import TextIO

from rich.console import Console
from rich.text import Text

HEARTBEAT_S = 30.0


class StatusLine:
    def __init__(self, enabled: bool | None = None, stream: TextIO | None = None,
                 heartbeat_s: float | None = None) -> None:
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = _is_terminal(self.stream) and os.environ.get("TERM", "") not in ("", "dumb")
        self.enabled = enabled
        self.rows = 0
        self.active = False
        # without the live line: a plain line every heartbeat_s seconds of the run (None: never)
        self.heartbeat_s = None if enabled else heartbeat_s
        self.next_beat = heartbeat_s or 0.0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed or full stderr costs nothing else
            self.enabled = False
            self.heartbeat_s = None

    def start(self) -> None:
        if not self.enabled:
            return
        self.rows = shutil.get_terminal_size((80, 24)).lines
        if self.rows < 5:
            self.enabled = False
            return
        # make room, then confine scrolling to every row but the last
        self._write("\n\x1b7" + f"\x1b[1;{self.rows - 1}r" + "\x1b8\x1b[1A")
        self.active = True

    def update(self, *, elapsed: float, steps: int, data_wait: float | None, gpu_util: float | None) -> None:
        if not self.active:
            self._heartbeat(elapsed, steps, data_wait, gpu_util)
            return
        size = shutil.get_terminal_size((80, 24))
        if size.lines != self.rows:  # resized: set the region again
            self.rows = size.lines
            self._write("\x1b7" + f"\x1b[1;{self.rows - 1}r" + "\x1b8")
        text = Text()
        text.append(" gpudoctor ", style="bold black on cyan")
        text.append(f" {elapsed:6.0f}s  steps {steps}")
        if data_wait is not None:
            style = "red" if data_wait > 0.3 else "yellow" if data_wait > 0.05 else "green"
            text.append("  data-wait ")
            text.append(f"{data_wait:.0%}", style=style)
        if gpu_util is not None:
            text.append(f"  GPU util {gpu_util:.0f}%")
        text.append("  (Ctrl-C: stop and report)", style="dim")
        text.truncate(max(10, size.columns - 1))
        buffer = io.StringIO()
        Console(file=buffer, force_terminal=True, width=size.columns, color_system="standard").print(text, end="")
        self._write(f"\x1b7\x1b[{self.rows};1H\x1b[2K" + buffer.getvalue() + "\x1b8")

    def _heartbeat(self, elapsed: float, steps: int, data_wait: float | None, gpu_util: float | None) -> None:
        if self.heartbeat_s is None or elapsed < self.next_beat or self.stream is None:
            return
        self.next_beat = elapsed + self.heartbeat_s
        parts = [f"gpudoctor: {elapsed:.0f} s", f"{steps} steps"]
        if data_wait is not None:
            parts.append(f"data wait {data_wait:.0%}")
        if gpu_util is not None:
            parts.append(f"GPU util {gpu_util:.0f}%")
        self._write(", ".join(parts) + " (still running; Ctrl-C: stop and report)\n")

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        self._write(f"\x1b7\x1b[r\x1b[{self.rows};1H\x1b[2K\x1b8")


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def say(message: str) -> None:
    """A line for the user on stderr; a closed or full stderr never costs the report."""
    if sys.stderr is None:  # started with stderr closed: print() would fall back to stdout
        return
    try:
        print(message, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass
