"""gpudoctor's own lines on stderr while the workload runs: `say` for a message, and the
live one-line status (terminals only).

The workload shares the terminal, so the line lives on the bottom row inside a
scroll region that the workload's output scrolls above (as apt's progress bar does):
its output is never overwritten, and nothing at all is written when stderr is not
a terminal.
"""

from __future__ import annotations

import io
import os
import shutil
import sys

from rich.console import Console
from rich.text import Text


class StatusLine:
    def __init__(self, enabled: bool | None = None, stream=None) -> None:
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = _is_terminal(self.stream) and os.environ.get("TERM", "") not in ("", "dumb")
        self.enabled = enabled
        self.rows = 0
        self.active = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False

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

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        self._write(f"\x1b7\x1b[r\x1b[{self.rows};1H\x1b[2K\x1b8")


def _is_terminal(stream) -> bool:
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
