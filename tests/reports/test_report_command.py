"""`gpudoctor report`: re-judge a saved Session and render it, or say clearly why not."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from synthetic import make_session

from gpudoctor import cli
from gpudoctor.base import exitcodes
from gpudoctor.model import Check, Evidence, Finding, Remedy
from gpudoctor.session import Session
from gpudoctor.verdict import registry


def _stall(session: Session) -> list[Finding]:
    return [
        Finding(
            "critical",
            "The loop waits for data",
            "waited 55% of each step",
            evidence={"share": Evidence(0.55, "share")},
            remedy=Remedy("More workers.", "num_workers=8"),
            estimated_gain=2.2,
        )
    ]


def _fp32(session: Session) -> list[Finding]:
    return [Finding("warning", "fp32 matmuls", "TF32 off")]


FAKE_CHECKS = [
    Check("GD102", "input-stall", 1, "Input pipeline stall", _stall, doc="Input pipeline stall.\n\nSynthetic page."),
    Check("GD104", "storage", 1, "Slow storage", lambda s: [], requires=("storage",)),
    Check("GD304", "fp32-matmul", 3, "fp32 matmuls", _fp32),
]


@pytest.fixture(autouse=True)
def fake_checks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A fixed catalog, so these tests exercise the command, not the real checks."""
    monkeypatch.setattr(registry, "load_checks", lambda: (FAKE_CHECKS, []))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def session_file(tmp_path: Path) -> Path:
    session = make_session()
    session.unavailable["storage"] = "no dataset path known"
    path = tmp_path / "run.session.json"
    session.save(path)
    return path


def test_default_writes_html_json_session_and_summarises_on_stderr(
    session_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["report", str(session_file)]) == 0
    out, err = capsys.readouterr()
    assert out == ""  # stdout stays clean for scripts
    assert "GD102" in err and "storage: no dataset path known" in err and "Written:" in err
    files = sorted(p.name for p in Path("gpudoctor-reports").iterdir())
    assert [name.split(".", 1)[1] for name in files] == ["html", "json", "session.json"]
    report = json.loads(next(Path("gpudoctor-reports").glob("*[0-9].json")).read_text())
    assert [f["id"] for f in report["findings"]] == ["GD102", "GD304"]
    assert report["docs"]["GD102"].startswith("Input pipeline stall.")
    assert report["files"]["session"].endswith(".session.json")


def test_single_format_goes_to_stdout(session_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(session_file), "--format", "junit", "--fail-on", "critical"]) == exitcodes.FAIL_ON
    suite = ET.fromstring(capsys.readouterr().out).find("testsuite")
    assert suite is not None and suite.get("failures") == "1" and suite.get("skipped") == "1"
    assert cli.main(["report", str(session_file), "--format", "markdown", "--ignore", "GD102,fp32-matmul"]) == 0
    md = capsys.readouterr().out
    assert "No findings." in md and "ignored (--ignore)" in md


def test_report_json_is_rejudged_from_its_session(session_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(session_file), "--out", "first"]) == 0
    capsys.readouterr()
    assert cli.main(["report", "first.json", "--format", "json", "--ignore", "GD304"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [f["id"] for f in data["findings"]] == ["GD102"]
    assert {"id": "GD304", "status": "skipped", "reason": "ignored (--ignore)"}.items() <= next(
        c for c in data["checks"] if c["id"] == "GD304"
    ).items()


def test_report_without_its_session_renders_the_saved_findings(
    session_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["report", str(session_file), "--out", "saved"]) == 0
    Path("saved.session.json").unlink()
    capsys.readouterr()
    assert cli.main(["report", "saved.json", "--format", "terminal"]) == 0
    out, err = capsys.readouterr()
    assert "session file is not beside it" in err and "GD102" in out


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (None, exitcodes.NOT_FOUND),
        ("", exitcodes.BAD_DATA),
        ('{"schema": "gpudoctor.session/1", "steps": ', exitcodes.BAD_DATA),  # truncated
        ('{"schema": "gpudoctor.session/1", "steps": "many"}', exitcodes.BAD_DATA),  # wrong type
        ('{"schema": "something.else/1"}', exitcodes.BAD_DATA),
        ("[1, 2]", exitcodes.BAD_DATA),
    ],
)
def test_bad_input_is_one_line_with_its_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, code: int
) -> None:
    path = tmp_path / "input.json"
    if content is not None:
        path.write_text(content)
    assert cli.main(["report", str(path)]) == code
    err = capsys.readouterr().err
    assert err.startswith("gpudoctor: error: ") and "Traceback" not in err


def test_existing_output_is_refused_and_force_replaces(session_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("taken.html").write_text("keep me")
    assert cli.main(["report", str(session_file), "--out", "taken"]) == exitcodes.OUTPUT_EXISTS
    assert Path("taken.html").read_text() == "keep me"
    assert cli.main(["report", str(session_file), "--out", "taken", "--force"]) == 0
    assert "Content-Security-Policy" in Path("taken.html").read_text()


def test_unwritable_out_is_refused(session_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("plainfile").write_text("")
    assert cli.main(["report", str(session_file), "--out", "plainfile/reports/"]) == exitcodes.CANNOT_WRITE


@pytest.mark.integration
def test_report_quiet_writes_the_files_without_a_summary(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "h200" / "tiny_kernels.session.json"
    out = tmp_path / "quiet"
    run = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "report", str(fixture), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == "" and run.stdout == ""
    assert (tmp_path / "quiet.html").exists() or list(tmp_path.glob("quiet*.html"))
