"""Sessions to and from plain JSON data: NaN and infinity out, typed dataclasses back in."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, get_args, get_origin, get_type_hints

from gpudoctor.base.jsonmodel import finite_numbers, nulled_non_finite

clean = nulled_non_finite  # NaN/inf (not valid JSON) become None, recursively
_ATOMS = (str, int, bool, type(None))


def plain(value: Any) -> Any:
    """clean(dataclasses.asdict(value)) in one walk: dataclasses as dicts of their fields,
    lists and tuples as lists, dict keys as strings, NaN and infinity as None; a list of
    plain numbers (a picture's spans) copied at once rather than number by number."""
    if hasattr(type(value), "__dataclass_fields__") and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if type(value) in _ATOMS:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return list(value) if finite_numbers(value) else [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return clean(copy.deepcopy(value))  # what asdict leaves as it is (a copy), cleaned


_HINTS: dict[type, dict[str, Any]] = {}


def build(tp: Any, data: Any) -> Any:
    """Rebuild a (nested) dataclass from plain JSON data, checking types on the way."""
    origin = get_origin(tp)
    if tp is Any:
        return data
    if origin is None and isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, data)
    args = get_args(tp)
    if origin is list:
        if not isinstance(data, list):
            raise TypeError(f"expected a list, got {type(data).__name__}")
        return [build(args[0], v) for v in data]
    if origin is dict:
        if not isinstance(data, dict):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        return {str(k): build(args[1], v) for k, v in data.items()}
    if origin is not None:  # a union such as `int | None`
        return _union(args, data)
    return _scalar(tp, data)


def _dataclass(tp: type, data: Any) -> Any:
    if not isinstance(data, dict):
        raise TypeError(f"{tp.__name__}: expected an object, got {type(data).__name__}")
    hints = _HINTS.get(tp)
    if hints is None:
        hints = _HINTS[tp] = get_type_hints(tp)
    kwargs = {}
    for f in dataclasses.fields(tp):
        if f.name in data:
            kwargs[f.name] = build(hints[f.name], data[f.name])
    return tp(**kwargs)  # unknown keys from newer writers are ignored


def _union(args: tuple[Any, ...], data: Any) -> Any:
    """The first member of the union that `data` builds as (None first, when it is one)."""
    if data is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return build(arg, data)
        except (TypeError, ValueError) as exc:
            errors.append(str(exc))
    raise TypeError("; ".join(errors) or "no matching type")


def _scalar(tp: Any, data: Any) -> Any:
    """A float, int, bool or str, checked (a bool is never a number; 3.0 is the integer 3)."""
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise TypeError(f"expected a number, got {type(data).__name__}")
        return float(data)
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            if isinstance(data, float) and data.is_integer():
                return int(data)
            raise TypeError(f"expected an integer, got {type(data).__name__}")
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise TypeError(f"expected true/false, got {type(data).__name__}")
        return data
    if tp is str:
        if not isinstance(data, str):
            raise TypeError(f"expected a string, got {type(data).__name__}")
        return data
    raise TypeError(f"unsupported field type {tp!r}")
