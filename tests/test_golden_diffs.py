"""Golden diffs: `gpudoctor diff` of recorded before/after fixture pairs (the same workload
with and without its remedy, recorded on the H200) must give the same JSON as the files
under tests/fixtures/golden/. Both ways are pinned: with the Sessions' steady steps (a
session beside each report) and with the reports' own timelines (saved reports only).

Regenerate after an intended change, and review the diff:

    GPUDOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_diffs.py
"""

from __future__ import annotations

import json
import os

import pytest
from test_golden_reports import FIXTURES, GOLDEN

from gpudoctor.diff.compare import compare
from gpudoctor.reports import json_report, render_diff
from gpudoctor.session import Session
from gpudoctor.verdict.judge import judge

PAIRS = [
    ("h200/loader_starved_gpu", "h200/loader_starved_gpu+workers15"),
    ("h200/loader_overlap", "h200/loader_overlap+workers8"),
    ("h200/item_per_layer", "h200/item_per_layer+no_item"),
    ("h200/starved_loader", "h200/healthy"),  # different workloads: compared with --force
]
CASES = [(b, a, with_sessions) for b, a in PAIRS for with_sessions in (True, False)]


def golden_name(before: str, after: str, with_sessions: bool) -> str:
    kind = "sessions" if with_sessions else "reports"
    return f"diff__{before.replace('/', '_')}__{after.replace('/', '_')}__{kind}.diff.json"


def diff_text(before: str, after: str, with_sessions: bool) -> str:
    sessions = [Session.load(FIXTURES / f"{name}.session.json") for name in (before, after)]
    reports = [json.loads(json_report.render(judge(s).report)) for s in sessions]  # as saved
    steps = [[r.duration_s for r in s.steady_steps()] if with_sessions else None for s in sessions]
    result = compare(reports[0], reports[1], before_name=f"{before}.json", after_name=f"{after}.json",
                     forced=True, before_steps=steps[0], after_steps=steps[1])
    written = json.loads(render_diff(result, "json"))
    written["tool"]["version"] = "<version>"
    for side in ("before", "after"):
        written[side]["tool_version"] = "<version>"
    text = json.dumps(written, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return json_report.escape_controls(text) + "\n"


@pytest.mark.parametrize(("before", "after", "with_sessions"), CASES,
                         ids=[golden_name(*c).removesuffix(".diff.json") for c in CASES])
def test_diff_matches_golden(before: str, after: str, with_sessions: bool) -> None:
    text = diff_text(before, after, with_sessions)
    target = GOLDEN / golden_name(before, after, with_sessions)
    if os.environ.get("GPUDOCTOR_UPDATE_GOLDEN"):
        target.write_text(text, encoding="utf-8")
    assert target.exists(), f"{target.name} missing: run with GPUDOCTOR_UPDATE_GOLDEN=1"
    assert text == target.read_text(encoding="utf-8")


def test_golden_diffs_say_something() -> None:
    data = json.loads((GOLDEN / golden_name(*PAIRS[0], True)).read_text(encoding="utf-8"))
    assert data["schema"] == "gpudoctor.diff/1"
    assert data["speedup"]["value"] > 2 and data["speedup"]["significant"] is True
    assert any(f["id"] == "GD101" for f in data["findings"]["resolved"])


def test_golden_diffs_fit_the_published_schema_and_round_trip() -> None:
    import jsonschema

    from gpudoctor import schemas
    from gpudoctor.diff.diff_model import Diff

    schema = schemas.load("diff-v1.schema.json")
    validator = jsonschema.validators.validator_for(schema)(schema)
    for case in CASES:
        text = (GOLDEN / golden_name(*case)).read_text(encoding="utf-8")
        data = json.loads(text)
        validator.validate(data)
        again = json.loads(render_diff(Diff.from_dict(data), "json"))
        assert again == data and list(again) == list(data)
