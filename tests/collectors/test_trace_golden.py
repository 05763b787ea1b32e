"""Golden numbers: what `analyze` reads from every committed real trace, recorded before the
parser was rewritten for speed; the rewrite must give the same ProfileSummary (replay included).

Regenerate (only when a change of numbers is intended): GPUDOCTOR_REGEN_GOLDEN=1 pytest this file.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from gpudoctor.commands.analyze import session_from_trace
from gpudoctor.run.analyze_helper import Helper

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "golden_traces" / "profiles.json.gz"
TRACES = sorted([*FIXTURES.glob("h200/traces/*.json.gz"), *FIXTURES.glob("h200/windows/*.trace.json.gz")])


def _profile(path: Path) -> dict:
    session = session_from_trace(path, helper=Helper())  # in this process (tests/test_helper.py: the helper's)
    data = session.to_dict()
    profile = data["profile"]
    profile["_processes"] = [p["pid"] for p in data.get("processes", [])]
    if isinstance(profile.get("replay"), dict):
        profile["replay"].pop("seconds", None)  # the replay's own run time, not a number of the trace
    return json.loads(json.dumps(profile))  # tuples -> lists, as stored


def _key(path: Path) -> str:
    return path.relative_to(FIXTURES).as_posix()


def test_every_trace_has_golden_numbers() -> None:
    if os.environ.get("GPUDOCTOR_REGEN_GOLDEN"):
        golden = {_key(p): _profile(p) for p in TRACES}
        with gzip.open(GOLDEN, "wt", encoding="utf-8") as fh:
            json.dump(golden, fh, sort_keys=True, separators=(",", ":"))
    golden = json.loads(gzip.decompress(GOLDEN.read_bytes()))
    assert sorted(golden) == [_key(p) for p in TRACES]
    assert len(TRACES) >= 20


@pytest.mark.parametrize("path", TRACES, ids=_key)
def test_same_numbers_as_recorded(path: Path) -> None:
    golden = json.loads(gzip.decompress(GOLDEN.read_bytes()))[_key(path)]
    profile = _profile(path)
    assert _recorded_fields(profile, golden) == golden


def _recorded_fields(value: object, golden: object) -> object:
    """`value` with only the keys `golden` has, at every depth (fields added since are checked elsewhere)."""
    if isinstance(value, dict) and isinstance(golden, dict):
        return {key: _recorded_fields(value.get(key), expected) for key, expected in golden.items()}
    if isinstance(value, list) and isinstance(golden, list) and len(value) == len(golden):
        return [_recorded_fields(item, expected) for item, expected in zip(value, golden)]
    return value
