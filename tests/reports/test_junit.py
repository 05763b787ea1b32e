"""JUnit XML: one testcase per check; CI shows failures, skips and errors with reasons."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from gpudoctor.reports import RenderOptions, junit, render


def _cases(xml: str) -> dict[str, ET.Element]:
    root = ET.fromstring(xml)
    return {case.get("name", "").split()[0]: case for case in root.iter("testcase")}


def test_one_testcase_per_check(report: dict[str, Any]) -> None:
    xml = junit.render(report, RenderOptions(fail_on="warning"))
    cases = _cases(xml)
    assert sorted(cases) == sorted(c["id"] for c in report["checks"])
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped"), suite.get("errors")) == (
        "6",
        "2",
        "1",
        "1",
    )


def test_fail_on_level_decides_failures(report: dict[str, Any]) -> None:
    cases = _cases(junit.render(report, RenderOptions(fail_on="critical")))
    assert cases["GD102"].find("failure") is not None
    assert cases["GD201"].find("failure") is None  # a warning, below --fail-on critical
    assert "GPU SMs barely used" in (cases["GD201"].findtext("system-out") or "")
    assert cases["GD304"].find("failure") is None  # info never fails at these levels


def test_skipped_and_errors_carry_the_reason(report: dict[str, Any]) -> None:
    cases = _cases(render(report, "junit"))
    skipped = cases["GD104"].find("skipped")
    assert skipped is not None and skipped.get("message") == "storage: no dataset path known"
    error = cases["GD301"].find("error")
    assert error is not None and "ZeroDivisionError" in (error.get("message") or "")
    assert cases["GD101"].find("failure") is None and cases["GD101"].find("skipped") is None


def test_hostile_text_is_escaped_and_parses(report_factory: Any) -> None:
    from synthetic import make_result

    hostile = ']]></failure><script>alert(1)</script>&amp;"\x00\x1b[31m\ud7ff'
    xml = junit.render(report_factory(result=make_result(hostile=hostile)), RenderOptions(fail_on="warning"))
    root = ET.fromstring(xml)  # still well-formed XML
    failure = next(root.iter("failure"))
    assert "<script>alert(1)</script>" in (failure.text or "")  # as text, escaped on the wire
    assert "<script>" not in xml
    assert "\x00" not in xml and "\x1b" not in xml
