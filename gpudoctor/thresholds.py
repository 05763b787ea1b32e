"""A threshold is a number that carries where it comes from.

A check's limits (a 5% data wait, 64 KB copies, 90% of the device) are written once, as
``Threshold`` (a float) or ``CountThreshold`` (an int) module constants. The code compares
against them like any number; ``gpudoctor explain ID`` prints the same objects with their
unit and source, so the page cannot drift from what the check does.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any


class Threshold(float):
    """A float limit: `Threshold("data wait worth a look", 0.05, "share of step time", "TensorBoard...")`."""

    name: str
    unit: str
    source: str
    module: str | None  # where it is defined, so a page can name it ({{NAME}}, see fill_page)

    def __new__(cls, name: str, value: float, unit: str = "", source: str = "") -> Threshold:
        obj = super().__new__(cls, value)
        obj.name, obj.unit, obj.source = name, unit, source
        obj.module = _caller_module()
        return obj

    def __getnewargs__(self) -> tuple[Any, ...]:  # copy and pickle rebuild it with its description
        return (self.name, float(self), self.unit, self.source)

    @property
    def value(self) -> float:
        return float(self)

    def shown(self) -> str:
        return _shown(float(self), self.unit)


class CountThreshold(int):
    """An integer limit (a count, a size in bytes), described like `Threshold`."""

    name: str
    unit: str
    source: str
    module: str | None  # where it is defined, so a page can name it ({{NAME}}, see fill_page)

    def __new__(cls, name: str, value: int, unit: str = "", source: str = "") -> CountThreshold:
        obj = super().__new__(cls, value)
        obj.name, obj.unit, obj.source = name, unit, source
        obj.module = _caller_module()
        return obj

    def __getnewargs__(self) -> tuple[Any, ...]:
        return (self.name, int(self), self.unit, self.source)

    @property
    def value(self) -> int:
        return int(self)

    def shown(self) -> str:
        return _shown(int(self), self.unit)


AnyThreshold = Threshold | CountThreshold
THRESHOLD_TYPES = (Threshold, CountThreshold)


def _shown(value: float, unit: str) -> str:
    if unit == "bytes":
        for size, suffix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if value >= size and value % size == 0:
                return f"{value // size:g} {suffix}"
        return f"{value:g} bytes"
    if unit == "x":
        return f"{value:.4g}x"
    if unit == "share":
        return f"{value * 100:.3g}%"
    if unit == "percentile":
        return f"{value:g}th percentile"
    if unit == "s" and 0 < value < 0.1:
        return f"{value * 1e3:g} ms"
    number = f"{value:g}" if isinstance(value, float) else str(value)
    if unit in ("", "ratio"):
        return number
    return number + "%" if unit == "%" else f"{number} {unit}"


def thresholds_in(namespace: dict[str, Any]) -> tuple[AnyThreshold, ...]:
    """The thresholds bound in a module's namespace (its own and those it imports), once each."""
    seen: dict[int, AnyThreshold] = {}
    for value in namespace.values():
        if isinstance(value, THRESHOLD_TYPES) and id(value) not in seen:
            seen[id(value)] = value
    return tuple(seen.values())


def _caller_module() -> str | None:
    try:
        return sys._getframe(2).f_globals.get("__name__")
    except ValueError:  # no such frame (created from C)
        return None


MARKER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")


def fill_page(text: str, namespace: Mapping[str, Any], also: Iterable[AnyThreshold] = ()) -> str:
    """A check's page with each ``{{NAME}}`` replaced by that threshold's value and unit.

    NAME is looked up in `namespace` (the check module's), then in the modules that define
    the thresholds in `also` (the shared analyses' limits the check declares). The page
    thus states the numbers the code compares against; an unknown NAME stays as written.
    """
    names: dict[str, Any] = {}
    for limit in also:
        module = sys.modules.get(limit.module or "")
        if module is not None:
            names.update(vars(module))
    names.update(namespace)

    def value(match: re.Match[str]) -> str:
        found = names.get(match.group(1))
        return found.shown() if isinstance(found, THRESHOLD_TYPES) else match.group(0)

    return MARKER.sub(value, text)
