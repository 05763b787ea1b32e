"""The published report schema: generated from the typed model, and every report fits it.

Validated with `jsonschema` (a test-only dependency): an implementation independent of
gpudoctor.base.jsonmodel, which generates the schema, so the two check each other.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from test_golden_reports import GOLDEN, SESSIONS, golden_name

from gpudoctor import schemas
from gpudoctor.reports import json_report
from gpudoctor.session import Session
from gpudoctor.verdict.build import REPORT_SCHEMA
from gpudoctor.verdict.judge import judge
from gpudoctor.verdict.report_model import Report


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = schemas.load("report-v1.schema.json")
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.mark.parametrize("name", sorted(schemas.GENERATED))
def test_committed_schema_is_the_generated_one(name: str) -> None:
    assert schemas.load(name) == json.loads(schemas.text(schemas.GENERATED[name]()))
    committed = Path(schemas.__file__).parent / name
    assert committed.read_text(encoding="utf-8") == schemas.text(schemas.GENERATED[name]()), \
        "stale schema: run scripts/write_schemas.py"


def test_schema_names_the_report_version() -> None:
    schema = schemas.load("report-v1.schema.json")
    assert schema["title"] == REPORT_SCHEMA == "gpudoctor.report/1"
    # the contract keys of the report (docs/architecture.md) are all published as required
    assert {"schema", "tool", "command", "exit_code", "duration_s", "environment", "summary", "findings",
            "checks"} <= set(schema["required"])
    finding = schema["$defs"]["ReportFinding"]
    assert finding["properties"]["severity"] == {"enum": ["info", "warning", "critical"]}
    required = {"id", "stage", "severity", "title", "message", "evidence", "remedy", "estimated_gain"}
    assert required <= set(finding["required"])
    assert schema["$defs"]["CheckRecord"]["properties"]["status"] == {"enum": ["pass", "finding", "skipped", "error"]}


@pytest.mark.parametrize("path", SESSIONS, ids=[p.stem for p in SESSIONS])
def test_every_fixture_report_fits_the_schema(path: Path, validator: Any) -> None:
    report = json.loads(json_report.render(judge(Session.load(path)).report))
    validator.validate(report)
    assert report["findings"] or report["checks"]


def test_golden_reports_fit_the_schema_and_round_trip(validator: Any) -> None:
    for path in SESSIONS:
        text = (GOLDEN / golden_name(path)).read_text(encoding="utf-8")
        data = json.loads(text)
        validator.validate({**data, "docs": {}})
        again = json.loads(json_report.render(Report.from_dict(data), indent=None))
        assert again.pop("docs") == {}
        assert again == data and list(again) == list(data)


def test_schema_refuses_what_the_model_refuses(validator: Any) -> None:
    text = (GOLDEN / golden_name(SESSIONS[0])).read_text(encoding="utf-8")
    good = {**json.loads(text), "docs": {}}
    for mutate in (
        lambda r: (r["findings"][0].__setitem__("severity", "fatal") if r["findings"]
                   else r.__setitem__("findings", [{}])),
        lambda r: r.__setitem__("duration_s", "long"),
        lambda r: r["checks"][0].__setitem__("status", "maybe"),
        lambda r: r["summary"].__setitem__("steps", 1.5),
    ):
        bad = copy.deepcopy(good)
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(bad)
        with pytest.raises(ValueError):
            Report.from_dict(bad)


def test_unknown_keys_are_allowed_and_kept(validator: Any) -> None:
    """Fields are only ever added: a newer report's extra keys fit v1 and survive a round trip."""
    text = (GOLDEN / golden_name(SESSIONS[0])).read_text(encoding="utf-8")
    data = {**json.loads(text), "docs": {}, "future_section": [{"rank": 0}]}
    data["summary"]["new_number"] = 1.5
    validator.validate(data)
    again = Report.from_dict(data).to_dict()
    assert again["future_section"] == [{"rank": 0}] and again["summary"]["new_number"] == 1.5


EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "docs" / "examples").glob("diagnose-*-h200.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_older_version_1_reports_still_fit(path: Path, validator: Any) -> None:
    """The example reports in docs/ were written by earlier gpudoctors (before a finding had
    its `window`, say): fields are only ever added, so they must fit version 1 and decode."""
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema"] == REPORT_SCHEMA
    validator.validate(data)
    assert Report.from_dict(data).findings
