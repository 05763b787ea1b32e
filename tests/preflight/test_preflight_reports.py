"""Preflight renderers: terminal checklist, JUnit (one case per item), self-contained HTML under the CSP."""

from __future__ import annotations

import datetime
import re
import xml.etree.ElementTree as ET

import pytest
from preflight_helpers import idle_gpu

from gpudoctor.preflight import audit
from gpudoctor.preflight.context import TorchFacts
from gpudoctor.preflight.job import JobRun
from gpudoctor.reports import preflight_html, preflight_junit, preflight_terminal
from gpudoctor.reports.html import script_hash

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(1)>[bold red]x[/]'


@pytest.fixture
def report(make_ctx):
    ctx = make_ctx([idle_gpu(0), idle_gpu(1, persistence=0, processes=[(4242, 2**30)])],
                   environ={"CUDA_LAUNCH_BLOCKING": "1", "NCCL_ALGO": HOSTILE},
                   torch=TorchFacts(version="2.11.0+cu130", cuda="13.0", device_count=2))
    diagnose = {
        "command": ["python", "train.py", "--token=secret123"],
        "exit_code": 0,
        "stop_reason": "steps",
        "duration_s": 9.0,
        "summary": {"verdict": "Input-bound: " + HOSTILE, "steps": 40, "steady_steps": 25},
        "findings": [
            {
                "id": "GD102",
                "severity": "critical",
                "title": "Input pipeline stall",
                "message": HOSTILE,
                "remedy": {"text": "add workers"},
            }
        ],
        "checks": [],
    }
    results, ignored = audit.apply_policy(audit.machine_items(ctx), ctx.policy, ["PF402"])
    return audit.build_report(results, ctx, ignored=ignored, run=JobRun(diagnose, 0, {"html": "reports/train.html"}),
                              started=datetime.datetime(2026, 1, 2, 3, 4, 5), duration_s=2.0)


def test_terminal_checklist(report) -> None:
    text = preflight_terminal.to_text(report)
    assert text.startswith(
        "gpudoctor preflight Not ready: 2 items failed (PF105 gpu-processes, PF501 cuda-launch-blocking)"
    )
    assert re.search(r"FAIL\s+│ PF501 cuda-launch-blocking\s+│ CUDA_LAUNCH_BLOCKING=1", text)
    assert re.search(r"WARN\s+│ PF103 persistence-mode", text)
    assert "-> PF501 cuda-launch-blocking: Unset it outside debugging sessions." in text
    assert text.index("-> PF105") < text.index("-> PF103")  # failures before warnings
    assert "Not checked (" in text and "PF304" not in text.split("Not checked")[0].split("PF105")[0]
    assert "[bold red]x[/]" in text  # machine strings are never console markup
    assert "full diagnosis: reports/train.html" in text
    assert "Ignored: PF402 cpu-governor" in text


def test_junit_one_case_per_item(report) -> None:
    root = ET.fromstring(preflight_junit.render(report))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(report["items"])
    assert suite.get("failures") == "2" and suite.get("tests") == str(len(cases))
    by_name = {c.get("name").split(":")[0]: c for c in cases}
    assert by_name["PF501 cuda-launch-blocking"].find("failure").get("message") == "CUDA_LAUNCH_BLOCKING=1"
    assert by_name["PF304 gpu-topology"].find("skipped") is None  # two GPUs: checked
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert int(suite.get("skipped")) == len(skipped) == report["counts"]["not-checked"]
    assert by_name["PF103 persistence-mode"].find("system-out").text.startswith("WARN: ")
    assert by_name["PF501 cuda-launch-blocking"].get("classname") == "gpudoctor.preflight.env"


def test_html_is_self_contained_under_the_shared_csp(report) -> None:
    page = preflight_html.render(report)
    head = page.split("</head>")[0]
    assert re.search(r'<meta http-equiv="Content-Security-Policy" content="default-src &#39;none&#39;', head)
    assert script_hash() in head
    assert page.index('id="PF501"') < page.index("<h2>Job</h2>") < page.index("<h2>Machine</h2>")  # checklist on top
    scripts = re.findall(r"<script[^>]*>", page)
    assert scripts == ["<script>"]
    assert not re.search(r'(src|href)="(?!data:|#)', page)
    assert "<img src=x" not in page and "&lt;img src=x" in page
    assert "secret123" not in page
    assert page.count('class="badge critical"') == 2


def test_json_ready_report_renders_with_no_job_and_no_gpu(make_ctx) -> None:
    import pynvml
    from preflight_helpers import CUDA_TORCH, FakeNvml

    from gpudoctor.preflight import gpu_facts
    from gpudoctor.preflight.context import Context

    ctx = Context(
        nvml=gpu_facts.read(FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)), torch=CUDA_TORCH, environ={}
    )
    results, ignored = audit.apply_policy(audit.machine_items(ctx), ctx.policy, [])
    report = audit.build_report(
        results, ctx, ignored=ignored, run=None, started=datetime.datetime(2026, 1, 1), duration_s=1
    )
    assert "<h2>Job</h2>" not in preflight_html.render(report)
    assert "Not checked (" in preflight_terminal.to_text(report)
    ET.fromstring(preflight_junit.render(report))


ESCAPE = "\x1b]0;pwned\x07\x1b[2J\x9b31m"


def test_environment_values_never_reach_the_terminal_or_the_page_as_controls(make_ctx) -> None:
    """Issue 27, item 13: PF501 and PF504 quoted env values raw, escape sequences included."""
    ctx = make_ctx([idle_gpu(0)], environ={"CUDA_LAUNCH_BLOCKING": "1" + ESCAPE, "NCCL_ALGO": "Ring" + ESCAPE})
    results, ignored = audit.apply_policy(audit.machine_items(ctx), ctx.policy, [])
    report = audit.build_report(results, ctx, ignored=ignored, run=None,
                                started=datetime.datetime(2026, 1, 2, 3, 4, 5), duration_s=1.0)
    for text in (preflight_terminal.to_text(report), preflight_html.render(report)):
        assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
        assert "\\x1b]0;pwned" in text  # shown, as an escape
