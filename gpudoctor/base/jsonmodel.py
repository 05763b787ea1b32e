"""One (de)serialisation layer for gpudoctor's typed JSON documents (report, diff, sweep).

A document is a tree of frozen dataclasses whose field annotations say what the JSON
holds: ``str``, ``int``, ``float`` (a finite number; ints are kept as they are), ``bool``,
``Literal[...]``, ``X | None``, ``list[X]``, ``dict[str, X]``, another dataclass, or ``Any``
(free JSON: a Session section, a check's evidence value). From those annotations alone
this module decodes (with a one-line reason when the data does not fit), encodes, and
writes the JSON Schema, so the three can never disagree.

Field options (``json_field``): the JSON key when it is not the field name (``try``), a
description for the schema, ``minimum`` for a measured number that cannot be below it (a
negative duration is refused on load, and the schema says so), ``max_items`` for a list
longer than gpudoctor ever writes (every list has a cap, MAX_ITEMS by default, and so
has every list inside free JSON: a hostile file is refused by count before it costs
minutes of decoding and rendering), and ``omit_none`` for an optional section that is left out
of the JSON when absent (how a new optional section is added without changing the shape
of older documents), and ``always`` for a key every document of the version has carried
from its first release: the schema publishes it as required (a key added later never is,
so older files of the same version still validate), while decoding still supplies the
default when it is missing. A field named ``extra`` marked ``extra=True`` keeps every key the
model does not know, in order, so a document from a newer gpudoctor round-trips intact:
fields are only ever added.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, cast

T = TypeVar("T")

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
MAX_ITEMS = 100_000  # any list of a document, typed or free JSON, unless its field says less


def is_real(value: Any) -> bool:
    """A measured number: int or float, not a bool, not NaN or infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_NUMBER_TYPES = frozenset({int, float})


def plain_numbers(values: list[Any] | tuple[Any, ...]) -> bool:
    """Every value an int or a float (not a bool, nor a subclass): a list of measurements
    (a picture's spans, a histogram), copied or checked in one pass instead of value by value."""
    return set(map(type, values)) <= _NUMBER_TYPES


def finite_numbers(values: list[Any] | tuple[Any, ...]) -> bool:
    """plain_numbers, none of them NaN or infinite (a finite sum says so: either would spread)."""
    if not plain_numbers(values):
        return False
    try:
        return math.isfinite(sum(values))
    except OverflowError:  # an int too large for a float: asked value by value
        return False


def nulled_non_finite(value: Any) -> Any:
    """A copy of parsed JSON in which NaN and infinity (not JSON) are null: unmeasurable."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): nulled_non_finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if finite_numbers(value):
            return list(value)
        return [nulled_non_finite(v) for v in value]
    return value


class DecodeError(ValueError):
    """The data does not fit the model; str() is one line saying where and why."""


def json_field(default: Any = dataclasses.MISSING, *, key: str | None = None, doc: str = "",
               omit_none: bool = False, always: bool = False, default_factory: Any = dataclasses.MISSING,
               minimum: float | None = None, max_items: int | None = None) -> Any:
    """A dataclass field with its JSON options (see the module docstring)."""
    metadata = {"key": key, "doc": doc, "omit_none": omit_none, "always": always, "minimum": minimum,
                "max_items": max_items}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def extra_field() -> Any:
    """The field that keeps the keys a model does not know (see the module docstring)."""
    return dataclasses.field(default_factory=dict, metadata={"extra": True}, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    hint: Any
    required: bool
    default: Any
    doc: str
    omit_none: bool
    always: bool
    minimum: float | None = None
    max_items: int | None = None


@functools.cache
def _fields(cls: type) -> tuple[tuple[_Field, ...], str | None]:
    hints = typing.get_type_hints(cls)
    out, extra = [], None
    for f in dataclasses.fields(cls):
        if f.metadata.get("extra"):
            extra = f.name
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory
        else:
            default = dataclasses.MISSING
        out.append(_Field(f.name, f.metadata.get("key") or f.name, hints[f.name],
                          default is dataclasses.MISSING, default, f.metadata.get("doc", ""),
                          bool(f.metadata.get("omit_none")), bool(f.metadata.get("always")),
                          f.metadata.get("minimum"), f.metadata.get("max_items")))
    return tuple(out), extra


def _optional(hint: Any) -> tuple[bool, Any]:
    """(allows None, the type without None)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        has_none = len(args) < len(typing.get_args(hint))
        return has_none, args[0] if len(args) == 1 else functools.reduce(operator.or_, args)
    return False, hint


_KIND = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if hint in _KIND:
        return _KIND[hint]
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(hint))
    if origin is list:
        return "a list"
    return "an object"


def _label(cls: type) -> str | None:
    return getattr(cls, "json_label", None)


def decode(cls: type[T], data: Any, *, prefix: str = "", key: str = "") -> T:
    """`data` (parsed JSON) as an instance of the dataclass `cls`, or DecodeError.

    Messages name the key ('duration_s' is not a number), prefixed with the list item they
    sit in for labelled models ("finding 2: 'title' is not a string")."""
    if not isinstance(data, Mapping):
        raise DecodeError(_say(prefix, key, "is not an object") if key or prefix
                          else "the document is not an object")
    fields, extra = _fields(cast(type, cls))
    kwargs: dict[str, Any] = {}
    known = set()
    for f in fields:
        known.add(f.key)
        path = f"{key}.{f.key}" if key else f.key
        value = data.get(f.key)
        if value is None and (f.key not in data or not _optional(f.hint)[0]):
            if f.required:
                raise DecodeError(_say(prefix, path, "is missing" if f.key not in data
                                       else f"is not {_describe(f.hint)}"))
            continue  # absent (or null where the model has a default): the default
        _bounds(f, value, prefix, path)
        kwargs[f.name] = _value(f.hint, value, prefix, path)
    if extra is not None:
        kwargs[extra] = {k: v for k, v in data.items() if k not in known}
        _check_free(kwargs[extra], prefix, key or "(unknown keys)")
    return cls(**kwargs)


def _bounds(f: _Field, value: Any, prefix: str, path: str) -> None:
    """A field's own limits, checked before its value is decoded (a long list is refused unread)."""
    if isinstance(value, list) and len(value) > (f.max_items or MAX_ITEMS):
        raise DecodeError(_say(prefix, path, f"has {len(value):,} entries (at most {f.max_items or MAX_ITEMS:,}: "
                               "more than gpudoctor writes)"))
    if f.minimum is not None and is_real(value) and value < f.minimum:
        raise DecodeError(_say(prefix, path, f"is {value}, below {f.minimum:g} (no measurement is)"))


def _check_free(value: Any, prefix: str, key: str) -> None:
    """Free JSON (a Session section, evidence): no list in it longer than MAX_ITEMS. Iterative:
    deep nesting was already bounded by the JSON parser."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            if len(item) > MAX_ITEMS:
                raise DecodeError(_say(prefix, key, f"holds a list of {len(item):,} entries (at most {MAX_ITEMS:,})"))
            if not plain_numbers(item):
                pending.extend(v for v in item if isinstance(v, (list, Mapping)))
        elif isinstance(item, Mapping):
            pending.extend(v for v in item.values() if isinstance(v, (list, Mapping)))


def _say(prefix: str, key: str, what: str) -> str:
    if not key:  # a list item itself: "finding 2 is not an object"
        return f"{prefix.rstrip(': ')} {what}"
    return f"{prefix}{key!r} {what}"


def _value(hint: Any, value: Any, prefix: str, key: str) -> Any:
    nullable, hint = _optional(hint)
    if value is None:
        if nullable or hint is Any:
            return None
        raise DecodeError(_say(prefix, key, f"is not {_describe(hint)}"))
    if hint is Any:
        _check_free(value, prefix, key)
        return value
    origin = typing.get_origin(hint)
    if origin is Literal:
        if isinstance(value, bool) or value not in typing.get_args(hint):
            raise DecodeError(_say(prefix, key, f"is not {_describe(hint)}"))
        return value
    if origin is list:
        return _list_value(hint, value, prefix, key)
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise DecodeError(_say(prefix, key, "is not an object"))
        _, item = typing.get_args(hint)
        return {str(k): _value(item, v, prefix, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return decode(hint, value, prefix=prefix, key=key)  # type: ignore[arg-type]
    ok = {
        str: isinstance(value, str),
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: is_real(value),
    }.get(hint)
    if ok is None:
        raise TypeError(f"jsonmodel cannot decode {hint!r}")
    if not ok:
        raise DecodeError(_say(prefix, key, f"is not {_describe(hint)}"))
    return value


def _list_value(hint: Any, value: Any, prefix: str, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise DecodeError(_say(prefix, key, "is not a list"))
    if len(value) > MAX_ITEMS:
        raise DecodeError(_say(prefix, key, f"has {len(value):,} entries (at most {MAX_ITEMS:,})"))
    (item,) = typing.get_args(hint)
    if (item is float and finite_numbers(value)) or (item is int and set(map(type, value)) <= {int}):
        return list(value)  # measurements: what the loop below would return, in one pass
    label = _label(item) if isinstance(item, type) and dataclasses.is_dataclass(item) else None
    if label:
        return [_value(item, v, f"{label} {n + 1}: ", "") for n, v in enumerate(value)]
    return [_value(item, v, prefix, f"{key}[{n}]") for n, v in enumerate(value)]


def encode(obj: Any) -> Any:
    """The JSON value of a model instance (dicts in field order, then the unknown keys)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields, extra = _fields(type(obj))
        out: dict[str, Any] = {}
        for f in fields:
            value = getattr(obj, f.name)
            if value is None and f.omit_none:
                continue
            out[f.key] = encode(value)
        if extra is not None:
            for key, value in getattr(obj, extra).items():
                out.setdefault(key, value)
        return out
    if isinstance(obj, (list, tuple)):
        return list(obj) if plain_numbers(obj) else [encode(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: encode(v) for k, v in obj.items()}
    return obj


def schema(cls: type, *, title: str, schema_id: str, description: str = "") -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the documents `cls` decodes."""
    defs: dict[str, Any] = {}
    root = _object_schema(cls, defs)
    out: dict[str, Any] = {"$schema": JSON_SCHEMA_DIALECT, "$id": schema_id, "title": title}
    if description:
        out["description"] = description
    out.update(root)
    out["$defs"] = dict(sorted(defs.items()))
    return out


def _object_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    fields, extra = _fields(cls)
    props = {}
    for f in fields:
        prop = _type_schema(f.hint, defs)
        if f.minimum is not None:  # these constrain only a number, an array: null still passes
            prop = {**prop, "minimum": f.minimum}
        if f.max_items is not None:
            prop = {**prop, "maxItems": f.max_items}
        if f.doc:
            prop = {"description": f.doc, **prop}
        props[f.key] = prop
    out: dict[str, Any] = {"type": "object"}
    doc = (cls.__doc__ or "").strip()
    if doc and not doc.startswith(cls.__name__ + "("):
        out["description"] = " ".join(doc.split())
    out["properties"] = props
    # published as required: what the decoder needs, and the keys marked `always` (in every
    # document of this version since its first); the decoder still reads documents without
    # the latter (their defaults), and a key added later is never required
    required = [f.key for f in fields if f.required or f.always]
    if required:
        out["required"] = required
    out["additionalProperties"] = extra is not None
    return out


def _type_schema(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    nullable, hint = _optional(hint)
    if hint is Any:
        return {}
    origin = typing.get_origin(hint)
    if origin is Literal:
        body: dict[str, Any] = {"enum": list(typing.get_args(hint))}
    elif origin is list:
        body = {"type": "array", "items": _type_schema(typing.get_args(hint)[0], defs)}
    elif origin in (dict, Mapping):
        body = {"type": "object", "additionalProperties": _type_schema(typing.get_args(hint)[1], defs)}
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        name = hint.__name__
        if name not in defs:
            defs[name] = {}  # a placeholder first: a model may refer to itself
            defs[name] = _object_schema(hint, defs)
        body = {"$ref": f"#/$defs/{name}"}
    else:
        body = {"type": {str: "string", int: "integer", float: "number", bool: "boolean"}[hint]}
    if not nullable:
        return body
    if "enum" in body:
        return {"enum": [*body["enum"], None]}
    if "type" in body and isinstance(body["type"], str):
        return {**body, "type": [body["type"], "null"]}
    return {"anyOf": [body, {"type": "null"}]}
