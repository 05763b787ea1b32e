"""A decoded trace (TraceIndex) handed to another process through a memory file, not pickled.

A long trace's second half is decoded in a helper process (trace_decode.decode_rest,
gpudoctor.run.analyze_helper), and the part of the window to replay goes the other way.
The half's columns, tens of MB, were joined there, pickled, written through the pipe, read
and unpickled here: about a tenth of a second this process waited for. Instead, the
sender writes each column into a memory file (os.memfd_create, made before the fork, so
both processes hold it), its parts one after the other in a few system calls (the join
and the copy at once); what it sends is small (the tables, the counts, where each column
lies). The receiver maps the file, privately, and reads the columns in place (the main
process's own join later copies them into the whole trace's columns, as it copied the
unpickled ones).

The same columns either way (the parts of a column are one array in the file, as a join
makes them). No memory file (not Linux), or one that cannot be written: the index is
pickled as before.
"""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpudoctor.collectors.trace_decode import _ARRAYS, _LISTS, EventColumns, TraceIndex, _joined

log = logging.getLogger(__name__)

ALIGN = 64  # each column starts on a cache line
MAX_BUFFERS = 1024  # buffers per writev call (IOV_MAX on Linux)


@dataclass
class SharedIndex:
    """A TraceIndex whose columns lie in a memory file: `index` holds all but the columns
    (its lists are empty), `columns` where each group's columns lie."""

    index: TraceIndex
    size: int  # bytes of the file in use
    # group -> field -> (offset, numpy dtype text, count), or the values themselves (an Ids list)
    columns: dict[str, dict[str, tuple[int, str, int] | list[Any]]] = field(default_factory=dict)


def memory_file(name: str) -> int | None:
    """A new memory file's descriptor (closed on exec), or None where there is none."""
    create = getattr(os, "memfd_create", None)
    if create is None:
        return None
    try:
        return int(create(f"gpudoctor-{name}", getattr(os, "MFD_CLOEXEC", 0)))
    except OSError as exc:
        log.debug("no memory file: %s", exc)
        return None


def export(index: TraceIndex, fd: int) -> SharedIndex | None:
    """Write `index`'s columns into the memory file `fd`; what to send instead of the index
    (None if the file could not be written: then send the index)."""
    skeleton = TraceIndex.__new__(TraceIndex)
    skeleton.__dict__.update(index.__dict__)
    for name in index.groups():
        setattr(skeleton, name, EventColumns(index.tables))
    shared = SharedIndex(index=skeleton, size=0)
    offset = 0
    try:
        for name, columns in index.groups().items():
            if not len(columns):
                continue
            placed: dict[str, tuple[int, str, int] | list[Any]] = {}
            for key in (*_ARRAYS, *_LISTS):
                values = _pieces(columns, key)
                if key in _LISTS and not all(isinstance(v, np.ndarray) for v in values):
                    placed[key] = list(_joined(values))  # a list of ids as decoded: sent as it is
                    continue
                array_pieces = _same_dtype(values)
                offset = -(-offset // ALIGN) * ALIGN
                placed[key] = (offset, array_pieces[0].dtype.str, sum(len(a) for a in array_pieces))
                offset = _write(fd, array_pieces, offset)
            shared.columns[name] = placed
    except OSError as exc:
        log.debug("the trace index not shared: %s", exc)
        return None
    shared.size = offset
    return shared


def restore(shared: SharedIndex, fd: int) -> TraceIndex:
    """The TraceIndex `export` wrote into the memory file `fd` (its columns read in place)."""
    index = shared.index
    if not shared.columns:
        return index
    mapping = mmap.mmap(fd, max(shared.size, 1), access=mmap.ACCESS_COPY)  # private: written, never shared
    for name, placed in shared.columns.items():
        part: dict[str, Any] = {}
        for key, where in placed.items():
            if isinstance(where, list):
                part[key] = where
            else:
                offset, dtype, count = where
                part[key] = np.frombuffer(mapping, dtype=np.dtype(dtype), count=count, offset=offset)
        getattr(index, name).append(part)
    return index


def _pieces(columns: EventColumns, key: str) -> list[Any]:
    """A column's values as the pieces a join would put together (without joining them)."""
    pieces = [columns.__dict__[key]] if key in columns.__dict__ else []
    pieces.extend(part[key] for part in columns._parts)
    return pieces


def _same_dtype(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The pieces of one column as contiguous arrays of one dtype (as np.concatenate makes it)."""
    dtype = np.result_type(*arrays) if arrays else np.dtype(np.int32)
    return [np.ascontiguousarray(a, dtype=dtype) for a in arrays]


def _write(fd: int, arrays: list[np.ndarray], offset: int) -> int:
    """Write the arrays one after the other at `offset`; the offset after them."""
    buffers = [a.data.cast("B") for a in arrays if a.nbytes]
    for start in range(0, len(buffers), MAX_BUFFERS):
        batch = buffers[start:start + MAX_BUFFERS]
        expected = sum(len(b) for b in batch)
        if os.pwritev(fd, batch, offset) != expected:  # a memory file writes all or fails: not this one
            raise OSError("short write to the memory file")
        offset += expected
    return offset
