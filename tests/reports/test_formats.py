"""The format registry (gpudoctor/reports/formats.py): a format registered there, and nowhere
else, is a --format choice of every command that writes reports, has its file suffix, and is
rendered and written like the built-in ones. CONTRIBUTING.md ("Adding a report format")
follows this sample."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import pytest
from synthetic import make_session

from gpudoctor import cli
from gpudoctor.reports import formats, render, show
from gpudoctor.reports.formats import PLAIN, RenderOptions, ReportFormat
from gpudoctor.verdict import output
from gpudoctor.verdict.judge import WritePlan, judge, write
from gpudoctor.verdict.report_model import Report

WRITING_COMMANDS = ("diagnose", "report", "analyze", "merge", "attach")


def render_csv(report: Report, options: RenderOptions = PLAIN) -> str:
    """The sample format: one line per finding (a formats.Renderer)."""
    return "".join(["id,severity,title\n", *(f"{f.id},{f.severity},{f.title}\n" for f in report.findings)])


@pytest.fixture
def csv_format(monkeypatch: pytest.MonkeyPatch) -> ReportFormat:
    fmt = ReportFormat("csv", render_csv, ".findings.csv")
    monkeypatch.setitem(formats.FORMATS, fmt.name, fmt)
    return fmt


@pytest.fixture
def session_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.session.json"
    make_session().save(path)
    return path


def _format_choices(parser: argparse.ArgumentParser, command: str) -> tuple[str, ...]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if a.dest == "formats")
    return tuple(action.choices or ())


def test_the_registry_gives_the_choices_suffixes_and_renderers() -> None:
    # terminal (shown, what a command prints by default) first, then the files: every command alike
    assert formats.choices() == ("terminal", "html", "json", "markdown", "junit")
    assert formats.choices(files_only=True) == ("html", "json", "markdown", "junit")
    assert formats.choices(diff=True) == ("terminal", "html", "json", "markdown")
    assert [formats.suffix(f) for f in formats.choices(files_only=True)] == [".html", ".json", ".md", ".junit.xml"]
    with pytest.raises(KeyError):
        formats.suffix("terminal")  # shown, never a file
    for name in formats.choices():
        assert callable(formats.renderer(name))
    with pytest.raises(ValueError, match="unknown report format 'nope'"):
        formats.renderer("nope")


def test_every_command_presents_its_format_choices_alike() -> None:
    """`--format FMT`, the help opening with the choices in their order; terminal first where it is one."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command in (*WRITING_COMMANDS, "diff"):
        action = next(a for a in sub.choices[command]._actions if a.dest == "formats")
        assert action.metavar == "FMT", command
        assert action.help is not None and action.help.startswith("|".join(action.choices or ()) + " "), command
        assert "terminal" not in (action.choices or ()) or (action.choices or ())[0] == "terminal", command


def test_a_registered_format_is_a_choice_of_every_command_that_writes_reports(csv_format: ReportFormat) -> None:
    parser = cli.build_parser()
    for command in WRITING_COMMANDS:
        assert "csv" in _format_choices(parser, command), command
    assert "csv" not in _format_choices(parser, "diff")  # it renders reports only (no diff_renderer)


def test_a_registered_format_is_planned_rendered_and_written(csv_format: ReportFormat, tmp_path: Path) -> None:
    session = make_session()
    report, _ = judge(session)
    paths = output.plan_outputs(str(tmp_path) + "/", "run", datetime.datetime(2026, 1, 2, 3, 4, 5),
                                formats.with_defaults(["csv"]), trace=False)
    written = write(report, WritePlan(paths, session=session))
    assert written.files["csv"] == tmp_path / "run-20260102-030405.findings.csv"
    lines = written.files["csv"].read_text().splitlines()
    assert lines[0] == "id,severity,title" and len(lines) == 1 + len(report["findings"])
    saved = json.loads(written.files["json"].read_text())
    assert saved["files"]["csv"] == "run-20260102-030405.findings.csv"  # the report names its sibling
    assert render(report, "csv") == written.files["csv"].read_text()


def test_a_registered_format_through_the_cli(csv_format: ReportFormat, session_file: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(session_file), "--out", str(tmp_path / "out" / "r"), "--format", "csv",
                     "--format", "json", "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["r.findings.csv", "r.json", "r.session.json"]
    assert (tmp_path / "out" / "r.findings.csv").read_text().startswith("id,severity,title\n")
    capsys.readouterr()
    assert cli.main(["report", str(session_file), "--format", "csv"]) == 0  # one format, no --out: stdout
    assert capsys.readouterr().out.startswith("id,severity,title\n")
    # a name given with the format's suffix is a stem like any other
    assert output.plan_outputs(str(tmp_path / "x.findings.csv"), "x", datetime.datetime.now(), ["csv"]).stem == "x"


def test_a_format_that_is_not_a_file_is_shown(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The typed exception: no suffix, so never planned as a file; a command shows it on a stream."""
    shown: list[str] = []
    fmt = ReportFormat("count", lambda report, options=PLAIN: f"{len(report.findings)}\n", None,
                       show=lambda report, stream: shown.append(report.summary.verdict or ""))
    monkeypatch.setitem(formats.FORMATS, fmt.name, fmt)
    assert "count" in formats.choices() and "count" not in formats.choices(files_only=True)
    with pytest.raises(output.GpudoctorError, match="unknown output format 'count'"):
        output.plan_outputs(None, "x", datetime.datetime.now(), ["count"])
    report, _ = judge(make_session())
    show(report, "count", sys.stdout)
    assert shown == [report["summary"]["verdict"]] and capsys.readouterr().out == ""
    assert render(report, "count") == f"{len(report['findings'])}\n"
