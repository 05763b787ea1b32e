"""Text that every layer writes: strings from the run made safe to show, and durations
and sizes in words. Stdlib and the foundation's jsonmodel only: the bottom of the layers
(docs/architecture.md), so the collectors, the checks, the pipeline and the renderers all
read it without reaching into each other.

Strings that come from the run (argv, exception text, kernel names, paths) may hold
terminal control sequences; `printable` shows them as escapes instead of letting them
move the cursor, retitle the window or hide lines.
"""

from __future__ import annotations

import re
from typing import Any

from gpudoctor.base.jsonmodel import plain_numbers

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
        return list(value) if plain_numbers(value) else [printable(v) for v in value]
    return value


def one_line(value: Any) -> str:
    """`value` as text for a single line (a title, a command line): control characters,
    newlines and tabs included, shown as escapes, so that it cannot start a line of its own."""
    text: str = printable(str(value))
    return text.replace("\n", "\\n").replace("\t", "\\t")


def format_duration(seconds: float) -> str:
    if -0.5e-6 < seconds < 0:
        seconds = 0.0  # a difference of equal times: "0 us", never "-0 us"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def format_run_seconds(seconds: float) -> str:
    """A run's or window's length as reports head it: "41.2 s"; under 0.1 s in ms or us
    ("33.2 ms"), never "0.0 s"."""
    return format_duration(seconds) if seconds < 0.1 else f"{seconds:.1f} s"


def format_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
