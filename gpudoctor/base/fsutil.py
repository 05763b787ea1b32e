"""Files written the safe way: atomically, never over something the user had."""

from __future__ import annotations

import dataclasses
import errno
import os
import tempfile
from pathlib import Path

from gpudoctor.base.bounded import InputTooLarge, Limits, read_bounded

__all__ = ["InputTooLarge", "read_limited", "unreadable_reason", "write_atomic"]


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


# A Session of a long run stays far below these (README, "Overhead and safety": 8 MiB for
# an hour on 16 cores and a GPU, about 40 MiB on 8 GPUs and 256 cores, and no larger for
# longer runs); more is something else (a device, a dump, a hostile file): refused instead
# of filling memory, before it is parsed.
MAX_JSON_INPUT_BYTES = 64 << 20
SESSION_LIMITS = Limits(max_bytes=MAX_JSON_INPUT_BYTES, max_objects=1_000_000, max_values=8_000_000,
                        what="session or report")


def read_limited(path: Path, limit: int = MAX_JSON_INPUT_BYTES) -> bytes:
    """The bytes of `path` within SESSION_LIMITS: /dev/zero, a huge file or a file of
    millions of tiny objects must not take the machine's memory (InputTooLarge, an
    OSError subclass, like the others Path.read_bytes raises)."""
    with open(path, "rb") as fh:
        return read_bounded(fh, dataclasses.replace(SESSION_LIMITS, max_bytes=limit))



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
