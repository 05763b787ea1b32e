"""Reading a Chrome/Kineto trace file safely: gzip told apart by content, a size limit, one-line errors."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import stat
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gpudoctor.base.bounded import InputTooLarge, Limits, read_bounded
from gpudoctor.base.fsutil import unreadable_reason

# uncompressed; parsed, a real Kineto trace takes about 2.6 times its bytes in memory (300
# bytes an event), a hostile one of tiny events far more: objects and values are bounded too
MAX_TRACE_BYTES = 512 << 20
MAX_TRACE_OBJECTS = 2_000_000  # about a million events (each with its args)
MAX_TRACE_VALUES = 24_000_000
# the streamed, typed decode (trace_decode) keeps columns (about 100 bytes an event) and no
# args objects, a chunk's structs at a time: it is bounded by events instead
MAX_TRACE_EVENTS = 2_000_000
# a window gpudoctor's own agent recorded is no hostile input, and losing it costs the whole
# kernel-level diagnosis: a fast loop traced with stacks for its full 20 s reaches millions of
# events. Still bounded (memory), three times the limits for a trace given to `analyze`.
OWN_WINDOW_SCALE = 3


class TraceError(Exception):
    """A trace that cannot be read; `not_found` tells a missing file from a bad one."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


@contextlib.contextmanager
def read_errors(path: Path) -> Iterator[None]:
    """Reading a trace file: what can go wrong, as one-line TraceErrors."""
    try:
        yield
    except InputTooLarge as exc:
        raise TraceError(f"{path}: trace (uncompressed) {exc}; profile fewer steps and try again") from None
    except (EOFError, zlib.error, gzip.BadGzipFile):
        raise TraceError(f"{path}: corrupt or truncated gzip file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})", not_found=True) from None


def load_trace(path: str | Path, max_bytes: int | None = None, *, own_window: bool = False) -> Any:
    """Read a Chrome trace (.json, or gzip told apart by its content) into plain JSON data.
    `own_window`: the agent's own window of this run (larger limits, see OWN_WINDOW_SCALE)."""
    path = Path(path)
    scale = OWN_WINDOW_SCALE if own_window else 1
    limit = (MAX_TRACE_BYTES if max_bytes is None else max_bytes) * scale
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as exc:  # missing, a symbolic link loop, no permission
        raise TraceError(f"{path}: {unreadable_reason(exc)}", not_found=True) from None
    if is_dir:
        found = sorted(p.name for p in path.glob("*.json*"))[:3]
        hint = f" (it holds {', '.join(found)})" if found else ""
        raise TraceError(f"{path}: is a directory, expected a trace file (.json or .json.gz){hint}", not_found=True)
    with read_errors(path):
        with open(path, "rb") as fh:
            compressed = fh.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if compressed else open(path, "rb")) as fh:
            raw = read_bounded(fh, Limits(limit, MAX_TRACE_OBJECTS * scale, MAX_TRACE_VALUES * scale,
                                          "profiler trace"))
    if not raw.strip():
        raise TraceError(f"{path}: empty file")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        kind = "gzip-compressed " if compressed else ""
        raise TraceError(f"{path}: {kind}file is not valid JSON (corrupt or truncated trace?)") from None


def trace_events(data: Any) -> list[Any]:
    """The event list of Chrome-trace data; TraceError when the data is something else."""
    events = data.get("traceEvents") if isinstance(data, Mapping) else data
    if isinstance(events, list):
        return events
    schema = str(data.get("schema", "")) if isinstance(data, Mapping) else ""
    if schema.startswith("gpudoctor."):
        raise TraceError(f"this is a gpudoctor file ({schema}), not a profiler trace "
                         "(use `gpudoctor report` to re-render it)")
    raise TraceError("not a Chrome/kineto trace: no traceEvents list (expected torch.profiler's export_chrome_trace)")
