"""Golden findings: every committed Session fixture gives the same diagnosis, run after run.

For each ``tests/fixtures/**/*.session.json`` the engine runs every built-in check; the
findings (id, severity, title, message, the numeric evidence, gain, what explains what)
and each check's status are compared with ``tests/fixtures/golden_findings/<name>.json``.
A refactor of the checks or the engine must leave these files untouched. When a change
of behaviour is intended, regenerate them and review the diff:

    GPUDOCTOR_REGEN_GOLDEN=1 python -m pytest tests/checks/test_golden_findings.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.model import Finding
from gpudoctor.session import Session
from gpudoctor.verdict.engine import run_checks
from gpudoctor.verdict.registry import load_checks

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOLDEN = FIXTURES / "golden_findings"
SESSIONS = sorted(FIXTURES.glob("**/*.session.json"))
REGENERATE = os.environ.get("GPUDOCTOR_REGEN_GOLDEN") == "1"


def _number(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def _finding(f: Finding) -> dict[str, Any]:
    numbers = {k: _number(e.value) for k, e in sorted(f.evidence.items())
               if isinstance(e.value, (int, float, str, bool)) or e.value is None}
    return {
        "id": f.id, "severity": f.severity, "title": f.title, "consequence_of": f.consequence_of,
        "estimated_gain": _number(f.estimated_gain), "ended_run": f.ended_run, "stage": f.stage,
        "window": f.window, "evidence": numbers, "message": f.message,
        "remedy": f.remedy.text if f.remedy is not None else None,
    }


def diagnosis(path: Path) -> dict[str, Any]:
    checks, errors = load_checks()
    assert not errors
    result = run_checks(Session.load(path), checks)
    return {
        "findings": [_finding(f) for f in result.findings],
        "checks": {o.id: o.status if o.reason is None else f"{o.status}: {o.reason}" for o in result.outcomes},
    }


def _golden_path(path: Path) -> Path:
    relative = path.relative_to(FIXTURES).as_posix().removesuffix(".session.json")
    return GOLDEN / (relative.replace("/", "__") + ".json")


def test_every_fixture_has_a_golden_file():
    assert SESSIONS, "no Session fixtures found"
    if REGENERATE:
        return
    missing = [p.name for p in SESSIONS if not _golden_path(p).exists()]
    assert not missing


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.name.removesuffix(".session.json"))
def test_fixture_gives_the_golden_findings(path: Path):
    got = diagnosis(path)
    golden = _golden_path(path)
    if REGENERATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return
    expected = json.loads(golden.read_text(encoding="utf-8"))
    assert [f["id"] for f in got["findings"]] == [f["id"] for f in expected["findings"]]
    assert got == expected
