"""The timeline section of the HTML report, without a browser (tests/reports/test_timeline_browser.py
drives one): what the view lays out from a report, and what the page holds."""

from __future__ import annotations

import copy
import html as html_lib
import re
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape

from gpudoctor.commands.analyze import session_from_trace
from gpudoctor.inprocess.result import Report as NotebookReport
from gpudoctor.reports import html
from gpudoctor.reports._common import prediction_headline, prediction_steps
from gpudoctor.reports.timeline_view import timeline_views
from gpudoctor.run.analyze_helper import Helper
from gpudoctor.session import Session
from gpudoctor.verdict.judge import judge
from gpudoctor.verdict.report_model import as_report

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


def _report(name: str) -> dict[str, Any]:
    return judge(Session.load(H200 / f"{name}.session.json")).report


def test_view_legend_adds_up_to_the_idle_time_and_the_top_finding_links_to_its_cause() -> None:
    report = as_report(_report("loader_starved_gpu"))
    (view,) = timeline_views(report)
    profile = report.evidence["profile"]
    assert view["legend"]["idle_us"] == profile["gpu_idle_us"]
    assert sum(row["us"] for row in view["legend"]["rows"]) == pytest.approx(profile["gpu_idle_us"], abs=0.01)
    assert view["legend"]["rows"][0]["cause"] == "data"  # the largest first
    top = report.findings[0]
    assert view["links"][top.id]["cause"] == "data"
    assert view["whatif"]["finding"] == top.id and view["whatif"]["scenario"] == "data"
    as_is, without = view["whatif_rows"]
    assert without["end"] < as_is["end"]  # the predicted steps are the shorter row
    assert all(0 <= gap["x"] <= view["width"] for gap in view["gaps"])
    assert {gap["cause"] for gap in view["gaps"]} >= {"data"}


def test_a_report_without_a_picture_has_no_timeline_section() -> None:
    page = html.render(_report("phases"))  # recorded before the picture existed: no trace to draw it from
    assert 'id="timeline"' not in page and '<svg class="tl-plot"' not in page


def test_call_sites_and_names_from_the_run_stay_text() -> None:
    data = copy.deepcopy(_report("item_per_layer"))
    picture = data["evidence"]["profile"]["picture"]
    picture["sites"] = [HOSTILE] * len(picture["sites"])
    picture["rows"][0]["name"] = HOSTILE
    page = html.render(data)
    assert HOSTILE not in page
    assert str(escape(HOSTILE)) in page
    assert "<img" not in page


def test_finding_card_headline_and_derivation_list() -> None:
    report = as_report(_report("starved_loader"))
    top = report.findings[0]
    headline = prediction_headline(top)
    assert headline is not None and re.fullmatch(r"now [\d.]+ ms -> predicted [\d.]+ ms \([\d.]+x\)", headline)
    steps = prediction_steps(top)
    assert steps[0].startswith("replay: ") and len(steps) >= 3
    assert all("; " not in step.split("(")[0] for step in steps)
    page = html.render(report)
    assert "how this was predicted" in page and "-0 us" not in page


def test_measured_gain_joins_the_headline() -> None:
    data = copy.deepcopy(_report("starved_loader"))
    data["findings"][0]["trial"] = {"measured_gain": 31.2, "text": "measured 31.20x"}
    assert prediction_headline(as_report(data).findings[0]).endswith("-> measured 31.20x")


def test_analyze_reports_draw_the_timeline() -> None:
    session = session_from_trace(H200 / "traces" / "host_sync.json.gz", helper=Helper())
    assert session.profile is not None and session.profile.picture is not None
    assert sum(session.profile.idle_by_cause_us.values()) == pytest.approx(session.profile.gpu_idle_us, abs=0.01)
    assert "sync" in session.profile.idle_by_cause_us
    page = html.render(judge(session).report)
    assert '<svg class="tl-plot"' in page


def test_the_notebook_view_shows_the_same_timeline() -> None:
    data = _report("tiny_kernels")
    shown = NotebookReport(data)._repr_html_()
    page = html_lib.unescape(shown.split('srcdoc="', 1)[1].split('" sandbox=', 1)[0])
    assert page == html.render(data) and '<svg class="tl-plot"' in page
