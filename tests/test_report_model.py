"""The typed report model: decoding, the one-line reasons it refuses with, and round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_golden_reports import GOLDEN, SESSIONS, golden_name

from gpudoctor import cli
from gpudoctor.base import exitcodes
from gpudoctor.base.jsonmodel import DecodeError, is_real
from gpudoctor.model import SEVERITIES, severity_rank
from gpudoctor.verdict.report_model import Report, ReportFinding, as_report


def golden(name: str = "starved_loader") -> dict[str, Any]:
    path = next(p for p in SESSIONS if p.name == f"{name}.session.json")
    data: dict[str, Any] = json.loads((GOLDEN / golden_name(path)).read_text(encoding="utf-8"))
    return data


def test_a_recorded_report_decodes_to_typed_values() -> None:
    report = Report.from_dict(golden())
    top = report.findings[0]
    assert isinstance(top, ReportFinding)
    # the workers and the stall they remedy: one remedy, one number (GD101's, replayed), GD101 first on the tie
    assert (top.id, top.severity, top.stage) == ("GD101", "critical", 1)
    assert top.prediction is not None and top.prediction.method == "replay" and top.prediction.gain is not None
    assert top.estimated_gain == round(top.prediction.gain, 2) == 15.1  # the H200 recording, replayed
    stall = report.findings[1]
    assert (stall.id, stall.evidence["stall_kind"].value) == ("GD102", "cpu-bound")
    assert stall.estimated_gain == top.estimated_gain and "34.10x" in stall.message  # its own, a cross-check
    assert report.summary.verdict and report.summary.verdict.startswith("Input-bound")
    assert [f.id for f in report.root_causes()] == [f.id for f in report.findings if f.consequence_of is None]
    assert {c.status for c in report.checks} <= {"pass", "finding", "skipped", "error"}


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda r: r.__setitem__("duration_s", "long"), "'duration_s' is not a number"),
    (lambda r: r.__setitem__("duration_s", float("nan")), "'duration_s' is not a number"),
    (lambda r: r.__setitem__("exit_code", True), "'exit_code' is not an integer"),
    (lambda r: r.__setitem__("command", ["python", 3]), "'command[1]' is not a string"),
    (lambda r: r.__setitem__("summary", []), "'summary' is not an object"),
    (lambda r: r["findings"].__setitem__(1, "GD101"), "finding 2 is not an object"),
    (lambda r: r["findings"][0].__setitem__("severity", "fatal"),
     "finding 1: 'severity' is not one of info, warning, critical"),
    (lambda r: r["findings"][0].pop("id"), "finding 1: 'id' is missing"),
    (lambda r: r["findings"][0].__setitem__("estimated_gain", "2x"), "finding 1: 'estimated_gain' is not a number"),
    (lambda r: r["findings"][0]["remedy"].__setitem__("code", 1), "finding 1: 'remedy.code' is not a string"),
    (lambda r: r["findings"][0]["evidence"].__setitem__("share", 0.5), "finding 1: 'evidence.share' is not an object"),
    (lambda r: r["checks"][0].__setitem__("status", "maybe"),
     "check 1: 'status' is not one of pass, finding, skipped, error"),
    (lambda r: r["summary"].__setitem__("steps", "many"), "'summary.steps' is not an integer"),
])
def test_a_report_that_does_not_fit_is_refused_with_one_line(mutate: Any, reason: str) -> None:
    data = golden()
    mutate(data)
    with pytest.raises(DecodeError) as info:
        Report.from_dict(data)
    assert str(info.value) == reason


def test_absent_and_null_optional_values_take_the_defaults() -> None:
    report = Report.from_dict({"schema": "gpudoctor.report/1", "findings": [{"id": "GD1", "severity": "info",
                                                                             "title": None}]})
    assert report.findings[0].title == "" and report.summary.steps == 0 and report.command == []
    assert Report.from_dict(report.to_dict()) == report


def test_in_memory_nan_is_not_measured_but_a_saved_nan_is_refused() -> None:
    data = golden()
    data["summary"]["power_w_mean"] = float("nan")
    assert as_report(data).summary.power_w_mean is None
    with pytest.raises(DecodeError):
        Report.from_dict(data)


def test_one_severity_rank_and_one_real_number_test() -> None:
    assert [severity_rank(s) for s in SEVERITIES] == [0, 1, 2]
    assert severity_rank(None) == severity_rank("fatal") == -1
    assert [is_real(v) for v in (1, 2.5, True, float("nan"), float("inf"), "1", None)] == [
        True, True, False, False, False, False, False]


def test_saved_report_that_does_not_fit_is_bad_data_in_one_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    data = golden()
    data["findings"][0]["severity"] = "fatal"
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert cli.main(["report", str(path), "--format", "terminal"]) == exitcodes.BAD_DATA
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [(f"gpudoctor: error: {path}: malformed gpudoctor report: "
                    "finding 1: 'severity' is not one of info, warning, critical")]


def test_saved_report_renders_typed_with_ignore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(golden()), encoding="utf-8")
    assert cli.main(["report", str(path), "--format", "json", "--ignore", "GD102"]) == exitcodes.OK
    out = json.loads(capsys.readouterr().out)
    assert "GD102" not in [f["id"] for f in out["findings"]]
    assert next(c for c in out["checks"] if c["id"] == "GD102")["reason"] == "ignored (--ignore)"


# issue 27 items 9 and 12: a saved report is bounded by count, and its measurements are not negative

@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda r: r.__setitem__("duration_s", -5.0), "'duration_s' is -5.0, below 0 (no measurement is)"),
    (lambda r: r["summary"].__setitem__("steps_per_s", -1), "'summary.steps_per_s' is -1, below 0 (no measurement is)"),
    (lambda r: r["findings"][0].__setitem__("estimated_gain", -2.0),
     "finding 1: 'estimated_gain' is -2.0, below 0 (no measurement is)"),
])
def test_negative_measurements_are_refused(mutate: Any, reason: str) -> None:
    data = golden()
    mutate(data)
    with pytest.raises(DecodeError) as info:
        Report.from_dict(data)
    assert str(info.value) == reason


def test_a_report_with_a_negative_duration_is_bad_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = golden()
    data["duration_s"] = -41.2
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert cli.main(["report", str(path), "--format", "json"]) == exitcodes.BAD_DATA
    assert "'duration_s' is -41.2, below 0" in capsys.readouterr().err


def test_a_report_with_more_findings_than_gpudoctor_writes_is_refused_by_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = golden()
    data["findings"] = [{"id": "GD102", "severity": "info", "title": "t"}] * 300_000  # the probe's 20 MB report
    path = tmp_path / "many.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert cli.main(["report", str(path), "--format", "html", "--out", str(tmp_path / "out")]) == exitcodes.BAD_DATA
    err = capsys.readouterr().err
    assert "'findings' has 300,000 entries (at most 5,000" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_every_list_is_capped_free_json_too() -> None:
    from gpudoctor.base.jsonmodel import MAX_ITEMS

    data = golden()
    data["evidence"]["timeline"] = {"t": list(range(MAX_ITEMS + 1))}
    with pytest.raises(DecodeError, match=r"'evidence\.timeline' holds a list of 100,001 entries"):
        Report.from_dict(data)
    data = golden()
    data["command"] = ["x"] * (MAX_ITEMS + 1)
    with pytest.raises(DecodeError, match="'command' has 100,001 entries"):
        Report.from_dict(data)
