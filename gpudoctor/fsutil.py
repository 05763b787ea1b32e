"""Files written the safe way: atomically, never over something the user had."""

from __future__ import annotations

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
