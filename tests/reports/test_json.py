"""The JSON report is the machine contract: keys, their order, finding order, valid JSON."""

from __future__ import annotations

import json
import math
from typing import Any

from gpudoctor.reports import json_report, render

CONTRACT = ["schema", "tool", "command", "exit_code", "duration_s", "environment", "summary", "findings", "checks"]
FINDING_KEYS = ["id", "stage", "severity", "title", "message", "evidence", "remedy", "estimated_gain"]


def test_contract_keys_first_and_in_order(report: dict[str, Any]) -> None:
    data = json.loads(json_report.render(report))
    assert list(data)[: len(CONTRACT)] == CONTRACT
    assert data["schema"] == "gpudoctor.report/1"
    assert data["tool"]["name"] == "gpudoctor"
    assert isinstance(data["command"], list)
    assert data["exit_code"] == 0
    assert data["duration_s"] == 60.0
    assert {"gpus", "cpu", "torch", "driver"} <= set(data["environment"])
    assert data["summary"]["verdict"].startswith("Input-bound")
    assert data["checks"][0] == {
        "id": "GD101",
        "slug": "workers",
        "stage": 1,
        "title": "DataLoader workers",
        "status": "pass",
        "reason": None,
    }


def test_extra_fields_are_kept(report: dict[str, Any]) -> None:
    data = json.loads(json_report.render(report))
    for key in report:
        assert key in data, f"{key} was dropped"
    assert data["files"] == report["files"]
    assert data["docs"]["GD102"].startswith("Input pipeline stall")
    assert len(data["evidence"]["timeline"]["gpu"]["t"]) == len(report["evidence"]["timeline"]["gpu"]["t"])


def test_findings_keep_engine_order_and_contract_keys(report: dict[str, Any]) -> None:
    data = json.loads(json_report.render(report))
    assert [f["id"] for f in data["findings"]] == [f["id"] for f in report["findings"]] == ["GD102", "GD304", "GD201"]
    for finding in data["findings"]:
        assert list(finding)[: len(FINDING_KEYS)] == FINDING_KEYS
        assert finding["severity"] in ("critical", "warning", "info")
    assert data["findings"][0]["remedy"] == {
        "text": "Raise num_workers to 8 and pin memory.",
        "code": "DataLoader(ds, num_workers=8, pin_memory=True)  # ",
    }
    assert data["findings"][0]["estimated_gain"] == 2.4
    assert data["findings"][2]["consequence_of"] == "GD102"


def test_non_finite_numbers_become_null(report: dict[str, Any]) -> None:
    report["summary"]["gpu_util_mean"] = math.nan
    report["summary"]["power_w_mean"] = math.inf
    text = json_report.render(report)
    data = json.loads(text)  # strict JSON: NaN would not survive other parsers
    assert data["summary"]["gpu_util_mean"] is None and data["summary"]["power_w_mean"] is None


def test_missing_contract_keys_are_present_as_null() -> None:
    data = json.loads(json_report.render({"schema": "gpudoctor.report/1", "custom": 1}))
    assert list(data)[: len(CONTRACT)] == CONTRACT
    assert data["findings"] == [] and data["checks"] == [] and data["custom"] == 1


def test_command_secrets_masked(report: dict[str, Any]) -> None:
    report["command"] = ["python", "train.py", "--hf-token", "hf_abcdefghijklmnopqrstuvwxyz"]
    data = json.loads(render(report, "json"))
    assert data["command"] == ["python", "train.py", "--hf-token", "***"]
