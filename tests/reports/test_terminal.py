"""The terminal summary: compact, ranked, and never styled by strings from the run."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from gpudoctor.reports import terminal


def _render(report: dict[str, Any], **kw: Any) -> str:
    buf = io.StringIO()
    terminal.render(report, Console(file=buf, width=140, color_system=None), **kw)
    return buf.getvalue()


def test_verdict_findings_remedy_skipped_and_files(report: dict[str, Any]) -> None:
    out = _render(report)
    lines = out.splitlines()
    assert lines[0].startswith("gpudoctor Input-bound")
    # ranked: the root cause first, its consequence last and marked as such
    assert out.index("GD102") < out.index("GD304") < out.index("GD201")
    assert "(consequence of GD102)" in out
    assert "2.4x" in out
    assert "DataLoader(ds, num_workers=8, pin_memory=True)" in out  # the remedy's code
    assert "storage: no dataset path known" in out  # skipped, with its reason
    assert "GD301 error: check failed: ZeroDivisionError" in out
    assert "train-20250101-120000.html" in out


def test_written_paths_override_report_files(report: dict[str, Any]) -> None:
    out = _render(report, written={"html": "somewhere/else.html"})
    assert "somewhere/else.html" in out
    assert "train-20250101-120000.html" not in out


def test_skipped_reasons_are_one_line_each(report_factory: Any) -> None:
    from synthetic import make_result

    result = make_result(hostile="\nsecond line\nthird")
    out = _render(report_factory(result=result))
    skipped = [line for line in out.splitlines() if "storage: no dataset path known" in line]
    assert len(skipped) == 1 and "second line" in skipped[0]


def test_markup_in_run_strings_is_printed_literally(report_factory: Any) -> None:
    from synthetic import make_result

    hostile = "[bold red]boom[/bold red] [link=https://evil.example]x[/link]"
    out = _render(report_factory(result=make_result(hostile=hostile)))
    assert "[bold red]boom[/bold red]" in out


def test_no_findings_says_so(report_factory: Any) -> None:
    from gpudoctor.verdict.engine import EngineResult

    out = _render(report_factory(result=EngineResult(findings=[], outcomes=[])))
    assert "No findings." in out
    assert out.startswith("gpudoctor No bottleneck found")


def test_to_text_is_plain(report: dict[str, Any]) -> None:
    text = terminal.to_text(report)
    assert "\x1b[" not in text
    assert "GD102" in text


def test_the_hotspot_line_names_the_top_kernel_operator_and_call_sites(report: dict[str, Any]) -> None:
    out = " ".join(_render(report).split())
    assert "Hotspots (profiled window 1 (start, 10 steps)):" in out
    assert "kernel ampere_sgemm_128x64_nn 39% of kernel time" in out
    assert "CPU op aten::addmm 60.0 ms self" in out
    assert "train_step (train.py:40) launches 74% of GPU time" in out
    assert "train_step (train.py:40) blocks 3.0 ms" in out


def test_a_stop_gpudoctor_asked_for_is_not_shown_as_a_failing_exit_code(report_factory: Any) -> None:
    """Issue 27, item 19: the header said "workload exit code 130" for a clean --steps stop."""
    stopped = report_factory()
    stopped.update(exit_code=130, stop_reason="steps")
    header = _render(stopped).splitlines()[1]
    assert "stopped: steps" in header and "exit code" not in header
    crashed = report_factory()
    crashed.update(exit_code=1, stop_reason="exited")
    assert "workload exit code 1" in _render(crashed).splitlines()[1]
    from html import unescape

    from gpudoctor.reports import render

    page = unescape(render(stopped, "html"))
    header = page.split("<header>", 1)[1].split("</header>", 1)[0]
    assert "exit code" not in header and "stopped: steps" in header
    assert "130 (SIGINT: the --steps stop gpudoctor asked for, not a failure)" in page
    assert "exit code" not in render(stopped, "markdown").split("\n\n", 2)[1]
    assert "exit code 1" in render(crashed, "markdown")


def test_every_command_wraps_at_one_width_without_a_terminal(report: dict[str, Any], monkeypatch: Any) -> None:
    """Issue 27, item 20: diagnose did not wrap, preflight wrapped at ~120, attach at ~80."""
    from gpudoctor.reports.console import output_console, output_width

    monkeypatch.delenv("COLUMNS", raising=False)
    assert output_width() == 100 and output_console(io.StringIO()).width == 100
    monkeypatch.setenv("COLUMNS", "72")
    assert output_width() == 72 and output_console(io.StringIO()).width == 72
    monkeypatch.setenv("COLUMNS", "bogus")
    assert output_width() == 100
    monkeypatch.delenv("COLUMNS")
    stream = io.StringIO()
    terminal.show_summary(report, stream)
    code = {("   " + line).rstrip() for f in report["findings"]
            for line in ((f.get("remedy") or {}).get("code") or "").split("\n")}
    lines = stream.getvalue().splitlines()
    assert max(len(line) for line in lines if line not in code) <= 100
    assert "   DataLoader(ds, num_workers=8, pin_memory=True)  #" in lines  # code: never re-flowed
