"""Where the human summaries go: a terminal, or a pipe, a file, a CI log.

At a terminal, rich lays the summary out to the terminal's width, with colour. Anywhere
else (a pipe, a file, a CI log) every command wraps at one width: $COLUMNS when it is
set, else 100 columns (rich alone would take 80, and each command used to pick its own).
Code snippets are never re-flowed there: they stay pasteable, longer lines and all.

Strings that come from the run (argv, exception text, kernel names, paths) may hold
terminal control sequences; `printable` shows them as escapes instead of letting them
move the cursor, retitle the window or hide lines.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console

# the escaping lives in gpudoctor.base.text (every layer uses it); named here for the renderers
from gpudoctor.base.text import one_line as one_line
from gpudoctor.base.text import printable as printable

# wide enough that no line of a summary is ever wrapped; lines are right-stripped after
UNWRAPPED_WIDTH = 100_000
# the width of every command's output without a terminal, unless $COLUMNS says otherwise
PLAIN_WIDTH = 100
MIN_WIDTH = 40

def output_width() -> int:
    """Where no terminal gives a width: $COLUMNS when it is a sane number, else 100."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return PLAIN_WIDTH
    return columns if columns >= MIN_WIDTH else PLAIN_WIDTH


def output_console(stream: TextIO, **options: Any) -> Console:
    """A console for a command's output on `stream`: the terminal's own width, or
    output_width() anywhere else."""
    return Console(file=stream, width=None if is_terminal(stream) else output_width(), **options)


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def plain_text(draw: Callable[[Console], None], width: int | None = None) -> str:
    """What `draw` prints, as plain text: no colour, lines right-stripped, and by default
    no wrapping at all."""
    # never Jupyter's: in a notebook rich would also display what it records (the text shown
    # twice, its lines padded to the width)
    console = Console(width=width or UNWRAPPED_WIDTH, record=True, file=_Null(), color_system=None,
                      force_terminal=False, force_jupyter=False, soft_wrap=False)
    draw(console)
    lines = console.export_text().split("\n")
    return "\n".join(line.rstrip() for line in lines)


def show(draw: Callable[[Console], None], stream: TextIO) -> None:
    """Print a summary on `stream`: laid out for it when it is a terminal, else as plain
    text wrapped at output_width(). A closed pipe raises BrokenPipeError (the CLI treats it
    as a normal end)."""
    if is_terminal(stream):
        draw(_TerminalConsole(file=stream))
        return
    stream.write(plain_text(draw, output_width()))
    stream.flush()


class _TerminalConsole(Console):
    def on_broken_pipe(self) -> None:  # rich's default exits with status 1
        raise BrokenPipeError


class _Null(io.StringIO):
    """A sink that keeps nothing: Console(record=True) holds the text itself."""

    def write(self, text: str) -> int:
        return len(text)
