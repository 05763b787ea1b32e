"""Golden findings of every committed fixture Session, so per-rank data (issue 18) changes none.

The stored files under tests/fixtures/golden_ranks/ hold, per fixture, the engine's
findings (id, severity, title, message, gain, consequence_of) and each check's status.
Multi-GPU checks (GD5xx) are new: on these one-process fixtures they must be skipped.
Regenerate after an intended change with ``GPUDOCTOR_REGEN_GOLDEN=1 pytest tests/checks/test_golden_ranks.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpudoctor.engine import run_checks
from gpudoctor.registry import load_checks
from gpudoctor.session import Session

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOLDEN = FIXTURES / "golden_ranks"
SESSIONS = sorted(p for p in FIXTURES.rglob("*.session.json") if GOLDEN not in p.parents)


def _outcome(session: Session) -> dict:
    checks, errors = load_checks()
    assert not errors
    result = run_checks(session, checks)
    return {
        "findings": [
            {"id": f.id, "severity": f.severity, "title": f.title, "message": f.message,
             "estimated_gain": None if f.estimated_gain is None else round(f.estimated_gain, 3),
             "consequence_of": f.consequence_of}
            for f in result.findings if not f.id.startswith("GD5")
        ],
        "checks": {o.id: o.status for o in result.outcomes if not o.id.startswith("GD5")},
        "multi_gpu": {o.id: o.status for o in result.outcomes if o.id.startswith("GD5")},
    }


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.name.replace(".session.json", ""))
def test_fixture_findings_unchanged(path: Path) -> None:
    got = _outcome(Session.load(path))
    golden = GOLDEN / (str(path.relative_to(FIXTURES)).replace("/", "__").replace(".session.json", ".json"))
    if os.environ.get("GPUDOCTOR_REGEN_GOLDEN"):
        stored = {k: v for k, v in got.items() if k != "multi_gpu"}
        golden.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    expected = json.loads(golden.read_text())
    assert got["findings"] == expected["findings"]
    assert got["checks"] == expected["checks"]
    assert all(status == "skipped" for status in got["multi_gpu"].values())
