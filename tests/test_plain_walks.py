"""The one-walk serialisation of a Session and the fast paths for lists of plain numbers give
what the walks value by value gave: dataclasses.asdict then nulled_non_finite, the typed
encode and decode, and the printable copy."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import namedtuple
from pathlib import Path

import pytest

from gpudoctor.base.jsonmodel import DecodeError, finite_numbers, nulled_non_finite, plain_numbers
from gpudoctor.reports.console import printable
from gpudoctor.session import Session
from gpudoctor.session.codec import plain

FIXTURES = Path(__file__).resolve().parent / "fixtures"
Pair = namedtuple("Pair", "a b")


@dataclasses.dataclass
class Inner:
    values: list[float]
    pair: tuple[float, float]


@dataclasses.dataclass
class Outer:
    inner: Inner
    table: dict
    items: list
    named: Pair
    flag: bool = True
    none: None = None


def _slow(value):
    return nulled_non_finite(dataclasses.asdict(value))


def test_plain_equals_asdict_then_nulled_on_odd_values():
    nan, inf = math.nan, math.inf
    outer = Outer(inner=Inner(values=[1.0, 2, nan, inf], pair=(3.0, -inf)), table={1: [0.5, 7], "k": {2.0: nan}},
                  items=[True, 1, 2.5, [1, 2], (3, 4), None, "s", Inner([], (0.0, 1.0))], named=Pair(1.5, nan))
    assert json.dumps(plain(outer)) == json.dumps(_slow(outer))
    big = Inner(values=[1.0, 10 ** 400], pair=(1e308, 1e308))  # an int no float holds; a sum that overflows
    assert plain(big) == _slow(big)


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.session.json"))[:40], ids=lambda p: p.name)
def test_a_sessions_dict_is_the_one_asdict_gave(path: Path):
    session = Session.load(path)
    assert json.dumps(session.to_dict()) == json.dumps(_slow(session))


def test_number_lists_are_told_apart_from_the_rest():
    assert plain_numbers([1, 2.5, -3]) and plain_numbers([])
    assert not plain_numbers([1, True]) and not plain_numbers([1.0, None]) and not plain_numbers([1, "2"])
    assert finite_numbers([1, 2.5]) and not finite_numbers([1.0, math.nan]) and not finite_numbers([math.inf, 1])
    assert nulled_non_finite([1e308, 1e308]) == [1e308, 1e308]  # an overflowing sum only sends it the slow way
    assert not finite_numbers([10 ** 400, 1.0])
    assert nulled_non_finite([1.0, math.nan, 2]) == [1.0, None, 2]
    assert printable([1, 2.5, "a\x00"]) == [1, 2.5, "a\\x00"]


def test_typed_float_lists_decode_and_refuse_as_before():
    from gpudoctor.base.jsonmodel import decode

    @dataclasses.dataclass(frozen=True)
    class Doc:
        spans: list[float]
        counts: list[int]

    assert decode(Doc, {"spans": [1, 2.5], "counts": [3, 4]}) == Doc([1, 2.5], [3, 4])
    for bad, where in (({"spans": [1.0, True], "counts": []}, "spans"), ({"spans": [], "counts": [1, 2.0]}, "counts"),
                       ({"spans": [1.0, "x"], "counts": []}, "spans")):
        with pytest.raises(DecodeError, match=where):
            decode(Doc, bad)
