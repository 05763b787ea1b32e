"""Files written the safe way: atomically, never over something the user had."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write `data` to `path` via a temporary file and a rename.

    With `exclusive`, refuse (FileExistsError) when `path` already exists, and never
    replace it even if it appears between the check and the rename.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if exclusive:
            os.link(tmp, path)  # fails with FileExistsError, atomically
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# A Session of a long run stays far below this (README, "Overhead and safety"); a larger
# "session" is something else (a device, a dump): refuse it instead of filling memory.
MAX_JSON_INPUT_BYTES = 256 << 20


class InputTooLarge(OSError):
    """An input file over the limit (raised by read_limited)."""


def read_limited(path: Path, limit: int = MAX_JSON_INPUT_BYTES) -> bytes:
    """The bytes of `path`, refusing more than `limit`: /dev/zero or a huge file must
    not take the machine's memory (OSError subclasses as Path.read_bytes raises them)."""
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise InputTooLarge(f"larger than {limit >> 20} MiB: not a gpudoctor file")
    return data



def unreadable_reason(exc: OSError) -> str:
    """Why an input path could not be opened, in the user's words: a symbolic link loop is
    not a missing file."""
    if exc.errno == errno.ELOOP:
        return "a symbolic link loop (too many levels of symbolic links)"
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ENOTDIR:
        return "no such file (a part of the path is not a directory)"
    return f"cannot read ({exc.strerror or exc})"
