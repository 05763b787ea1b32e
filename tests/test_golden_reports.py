"""Golden reports: every committed Session fixture, judged and rendered as the JSON report,
must give the same bytes as the file recorded under tests/fixtures/golden/.

This pins the whole report (findings, verdict, summary, evidence) so a refactor of the
report model, the serialisation or the renderers cannot change what users get. The
normalisation is deliberately small: the tool version (it changes every release) and the
checks' explain pages (documentation, edited independently of the findings).

Regenerate after an intended change of behaviour, and review the diff:

    GPUDOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_reports.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.reports import json_report
from gpudoctor.session import Session
from gpudoctor.verdict.judge import judge

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOLDEN = FIXTURES / "golden"
SESSIONS = sorted(p for p in FIXTURES.rglob("*.session.json") if GOLDEN not in p.parents)


def golden_name(path: Path) -> str:
    """tests/fixtures/h200/oom.session.json -> h200__oom.report.json"""
    rel = path.relative_to(FIXTURES).as_posix()
    return rel[: -len(".session.json")].replace("/", "__") + ".report.json"


def normalised(report: dict[str, Any]) -> dict[str, Any]:
    out = dict(report)
    out["tool"] = {**(report.get("tool") or {}), "version": "<version>"}
    out.pop("docs", None)
    return out


def golden_text(path: Path) -> str:
    """The compact JSON report as `--format json` writes it, then normalised (the same
    json.dumps arguments as json_report.render(indent=None), so nothing else moves)."""
    written = json.loads(json_report.render(judge(Session.load(path)).report, indent=None))
    text = json.dumps(normalised(written), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return json_report.escape_controls(text) + "\n"


def test_every_session_fixture_has_a_golden_report() -> None:
    assert SESSIONS, "no Session fixtures found"
    expected = {golden_name(p) for p in SESSIONS}
    recorded = {p.name for p in GOLDEN.glob("*.report.json")}
    if os.environ.get("GPUDOCTOR_UPDATE_GOLDEN"):
        for stale in recorded - expected:
            (GOLDEN / stale).unlink()
        return
    assert recorded == expected


@pytest.mark.parametrize("path", SESSIONS, ids=[p.stem for p in SESSIONS])
def test_report_matches_golden(path: Path) -> None:
    text = golden_text(path)
    target = GOLDEN / golden_name(path)
    if os.environ.get("GPUDOCTOR_UPDATE_GOLDEN"):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    assert target.exists(), f"{target.name} missing: run with GPUDOCTOR_UPDATE_GOLDEN=1"
    assert text == target.read_text(encoding="utf-8")
