"""Where the human summaries go: a terminal, or a pipe, a file, a CI log.

At a terminal, rich lays the summary out to the terminal's width, with colour. Anywhere
else nothing is wrapped or cut: a code snippet stays pasteable and a hint stays whole,
whatever width a CI runner pretends to have (rich falls back to 80 columns there).

Strings that come from the run (argv, exception text, kernel names, paths) may hold
terminal control sequences; `printable` shows them as escapes instead of letting them
move the cursor, retitle the window or hide lines.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console

# wide enough that no line of a summary is ever wrapped; lines are right-stripped after
UNWRAPPED_WIDTH = 100_000

# C0 controls but tab and newline, DEL, C1 controls (0x9b is CSI on many terminals), and
# the bidirectional overrides that reorder what a reader sees
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: Any) -> Any:
    """A copy of `value` (str, or dicts and lists of them) with control characters escaped."""
    if isinstance(value, str):
        return _UNPRINTABLE.sub(_escape, value)
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(v) for v in value]
    return value


def one_line(value: Any) -> str:
    """`value` as text for a single line (a title, a command line): control characters,
    newlines and tabs included, shown as escapes, so that it cannot start a line of its own."""
    text = printable(str(value))
    return text.replace("\n", "\\n").replace("\t", "\\t")


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
    unwrapped text. A closed pipe raises BrokenPipeError (the CLI treats it as a normal end)."""
    if is_terminal(stream):
        draw(_TerminalConsole(file=stream))
        return
    stream.write(plain_text(draw))
    stream.flush()


class _TerminalConsole(Console):
    def on_broken_pipe(self) -> None:  # rich's default exits with status 1
        raise BrokenPipeError


class _Null(io.StringIO):
    """A sink that keeps nothing: Console(record=True) holds the text itself."""

    def write(self, text: str) -> int:
        return len(text)
