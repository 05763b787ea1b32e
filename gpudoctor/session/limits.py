"""What a loaded Session may hold: numbers that are finite, not negative and of sane size;
lists and strings no longer than gpudoctor ever writes.

A Session file may be hand-edited, truncated and repaired, or hostile. The checks are
pure functions that trust their input's ranges (a count is never negative, a core count
never infinite), so the ranges are enforced once, here, when a Session is loaded: bad
values are refused with the field's name (exit 65), never met by a check mid-arithmetic
(an OverflowError, a ZeroDivisionError, a 20,000-bucket histogram drawn bucket by bucket).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

# Far beyond any real measurement (1e15 bytes is a petabyte, 1e15 us three decades), yet
# small enough that sums and products of a few of them stay finite.
MAX_NUMBER = 1e15
SIGNED = {"exit_code"}  # may be negative in sessions written before exit codes were normalised
MAX_STRING = 1 << 20
DEFAULT_MAX_ITEMS = 100_000
# fields whose length gpudoctor bounds much lower than the default (what it writes, with room)
MAX_ITEMS = {
    "cpu_samples": 30_000,  # 7,200 kept samples at most (merged pairwise beyond), plus pending
    "gpu_samples": 500_000,  # the same per GPU, for up to 64 GPUs
    "per_core_percent": 8192,
    "records": 20_000,  # step records: 5,000 kept
    "kernel_duration_hist": 64,  # 8 buckets
    "memcpy": 64,
    "top_kernels": 1000,
    "top_ops": 1000,
    "sync_sites": 1000,
    "errors": 20_000,
    "notes": 1000,
    "unavailable": 1000,
    "gpus": 1024,
    "device_uuids": 1024,
    "clock_event_reasons": 64,
}


class InvalidSession(ValueError):
    """A value out of range; the message names the field."""


def validate(obj: Any, path: str = "session") -> None:
    """Raise InvalidSession for the first value out of range in a built Session."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _value(getattr(obj, f.name), f"{path}.{f.name}" if path != "session" else f.name, f.name)
        return
    raise InvalidSession(f"{path}: not a record")


def _value(value: Any, path: str, name: str) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        _number(value, path, name)
    elif isinstance(value, str):
        if len(value) > MAX_STRING:
            raise InvalidSession(f"{path} is a string of {len(value):,} characters (at most {MAX_STRING:,})")
    elif isinstance(value, (list, dict)):
        limit = MAX_ITEMS.get(name, DEFAULT_MAX_ITEMS)
        if len(value) > limit:
            raise InvalidSession(f"{path} has {len(value):,} entries (at most {limit:,})")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and len(key) > MAX_STRING:
                raise InvalidSession(f"{path} has a key of {len(key):,} characters")
            _value(item, f"{path}[{key!r}]" if isinstance(value, dict) else f"{path}[{key}]", name)
    elif dataclasses.is_dataclass(value):
        validate(value, path)


def _number(value: float, path: str, name: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidSession(f"{path} is {value} (not a number a measurement can have)")
    if value < 0 and name not in SIGNED:
        raise InvalidSession(f"{path} is negative ({value})")
    if abs(value) > MAX_NUMBER:
        raise InvalidSession(f"{path} is {value:.3g}, beyond any measurement (at most {MAX_NUMBER:.0e})")
