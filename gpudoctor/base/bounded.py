"""Reading JSON input with memory and work bounded by its content, not only its size.

A file's size says little about what parsing it costs: a 1 MB gzip can expand to a GiB,
and a GiB of `{"ph":"X"},` becomes tens of millions of Python dicts (several times the
bytes in memory). So the bytes are read in chunks while the objects (`{`) and values
(`,`) they would become are counted, and reading stops at the first limit passed:
memory stays near the limits whatever the input claims. The counts over-estimate
(a `{` or `,` inside a string counts too), which only errs on the side of refusing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_objects: int  # JSON objects ({...}): each a Python dict
    max_values: int  # roughly the values in arrays and objects (commas)
    what: str  # "session", "trace": for the message


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class InputTooLarge(OSError):
    """Input over a limit: never read into memory whole."""


def read_bounded(stream: Readable, limits: Limits) -> bytes:
    return b"".join(iter_bounded(stream, limits))


def iter_bounded(stream: Readable, limits: Limits, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The stream's bytes in chunks, raising InputTooLarge at the first limit passed."""
    size = objects = values = 0
    while True:
        chunk = stream.read(chunk_bytes)
        if not chunk:
            return
        size += len(chunk)
        objects += chunk.count(b"{")
        values += chunk.count(b",")
        if size > limits.max_bytes:
            raise InputTooLarge(f"larger than {limits.max_bytes >> 20} MiB: "
                                f"not a {limits.what} gpudoctor can read")
        if objects > limits.max_objects:
            raise InputTooLarge(f"more than {limits.max_objects:,} JSON objects: far more than a {limits.what} "
                                "holds; refused rather than filling memory")
        if values > limits.max_values:
            raise InputTooLarge(f"more than {limits.max_values:,} JSON values: far more than a {limits.what} "
                                "holds; refused rather than filling memory")
        yield chunk
