"""What gpudoctor prints, wherever it goes: a closed pipe, a CI log (no terminal), a
terminal that must not obey escape sequences from the run, a closed stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.commands.diagnose import report_stem
from gpudoctor.reports import terminal
from gpudoctor.reports.console import printable

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "h200"
SESSION = FIXTURES / "starved_loader.session.json"
GPUDOCTOR = [sys.executable, "-m", "gpudoctor"]
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil"


def _closed_pipe_run(*args: str) -> subprocess.CompletedProcess:
    """gpudoctor with stdout a pipe whose reader is already gone (`| head` after line one)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([*GPUDOCTOR, *args], stdout=write, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              timeout=120, check=False)
    finally:
        os.close(write)


@pytest.mark.integration
@pytest.mark.parametrize("args", [
    ["report", str(SESSION), "--format", "terminal"],
    ["report", str(SESSION), "--format", "markdown"],
    ["report", str(SESSION), "--format", "json"],
    ["diff", str(SESSION), str(SESSION)],
    ["checks"],
], ids=lambda a: " ".join(a[:1] + a[2:]))
def test_a_closed_pipe_is_a_normal_end(args: list[str]) -> None:
    proc = _closed_pipe_run(*args)
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr and b"Exception ignored" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("command, stem", [
    (["python", "script.py", "name", "12"], "script"),
    (["python3", "-u", "train.py", "--out", "x.bin"], "train"),
    (["torchrun", "--nproc-per-node", "2", "train.py", "--lr", "3"], "train"),
    (["python", "-m", "pkg.train", "7"], "train"),
    (["./launch.sh", "fast"], "launch"),
])
def test_report_is_named_after_the_script_not_its_last_argument(command: list[str], stem: str) -> None:
    assert report_stem(command) == stem


def _session_with(tmp_path: Path, **changes: object) -> Path:
    data = json.loads(SESSION.read_text())
    data.update(changes)
    path = tmp_path / "s.session.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.integration
def test_without_a_terminal_lines_wrap_at_columns_and_code_is_never_reflowed(tmp_path: Path) -> None:
    """Issue 27, item 20: without a terminal every command wraps at one width ($COLUMNS, else
    100); table rows were about 200 columns wide. Code snippets stay whole, hints uncut."""
    # a CI log: stdout is a pipe, and COLUMNS says 80 as many runners do
    proc = subprocess.run([*GPUDOCTOR, "report", str(SESSION), "--format", "terminal"], capture_output=True,
                          text=True, timeout=120, check=True, env=dict(os.environ, COLUMNS="80"))
    report = json.loads(subprocess.run([*GPUDOCTOR, "report", str(SESSION), "--format", "json"], capture_output=True,
                                       text=True, timeout=120, check=True).stdout)
    lines = proc.stdout.splitlines()
    assert all(line == line.rstrip() for line in lines)
    code_lines = set()
    # the remedies shown (root causes with a remedy, not notes: reports/_common.top_remedies): code
    # pasteable line by line
    shown = [f for f in report["findings"] if not f.get("consequence_of") and f.get("remedy")
             and f["severity"] != "info"][:3]
    assert shown
    for finding in shown:
        code = (finding.get("remedy") or {}).get("code")
        for code_line in (code or "").splitlines():
            assert "   " + code_line in lines, (code_line, proc.stdout)
            code_lines.add("   " + code_line)
    assert all(len(line) <= 80 for line in lines if line not in code_lines), proc.stdout
    joined = " ".join(" ".join(lines).split())
    for check in report["checks"]:
        if check["status"] == "skipped":
            assert " ".join(check["reason"].split()) in joined  # hints are wrapped, never cut


def test_terminal_text_keeps_code_comments_on_their_line() -> None:
    report = {"summary": {"verdict": "x"}, "findings": [{
        "id": "GD101", "severity": "warning", "title": "t", "remedy": {
            "text": "do it", "code": CODE}}]}
    text = terminal.to_text(report)  # what `--format terminal` writes to a file
    assert "   " + CODE in text.splitlines()


CODE = ("loader = DataLoader(dataset, batch_size=32, num_workers=8, pin_memory=True, persistent_workers=True)"
        "  # 8 = the usable cores")


@pytest.mark.integration
@pytest.mark.parametrize("fmt", ["terminal", "markdown", "json", "junit", "html"])
def test_escape_sequences_from_the_session_never_reach_the_terminal(tmp_path: Path, fmt: str) -> None:
    error = {"pid": 1, "kind": "exception", "type": "RuntimeError" + HOSTILE, "message": "boom" + HOSTILE}
    path = _session_with(tmp_path, command=["python", "train.py", HOSTILE], errors=[error], exit_code=1,
                         notes=["note" + HOSTILE])
    proc = subprocess.run([*GPUDOCTOR, "report", str(path), "--format", fmt], capture_output=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    for raw in (b"\x1b", b"\x07", "\x9b".encode(), "\u202e".encode()):
        assert raw not in proc.stdout and raw not in proc.stderr, (raw, proc.stdout[:2000])
    if fmt == "json":
        assert json.loads(proc.stdout)["command"][-1] == HOSTILE  # the same data, escaped


@pytest.mark.integration
def test_escape_sequences_never_reach_the_terminal_in_diff(tmp_path: Path) -> None:
    command = json.loads(SESSION.read_text())["command"] + [HOSTILE]
    path = _session_with(tmp_path, command=command, notes=[HOSTILE])
    path = path.rename(tmp_path / "s\x1b[2J.session.json")  # a hostile file name too
    for fmt in ("terminal", "markdown", "json", "html"):
        proc = subprocess.run([*GPUDOCTOR, "diff", str(SESSION), str(path), "--format", fmt], capture_output=True,
                              timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert b"\x1b" not in proc.stdout and "\x9b".encode() not in proc.stdout, (fmt, proc.stdout[:2000])


def test_the_crash_line_shows_escapes_not_controls(capsys: pytest.CaptureFixture[str]) -> None:
    from gpudoctor.pipeline import _announce_end
    from gpudoctor.session import ErrorEvent, Session

    session = Session(exit_code=1, stop_reason="exited", duration_s=2.0,
                      errors=[ErrorEvent(pid=1, kind="exception", type="ValueError", message="bad" + HOSTILE)])
    _announce_end(session)
    err = capsys.readouterr().err
    assert "crashed: ValueError: bad" in err and "\x1b" not in err and "\\x1b" in err


def test_printable_keeps_newlines_and_tabs() -> None:
    assert printable({"a\x1b": ["x\ty\n", 3]}) == {"a\\x1b": ["x\ty\n", 3]}


@pytest.mark.integration
def test_closed_stderr_never_sends_messages_to_stdout(tmp_path: Path) -> None:
    def close_stderr() -> None:
        os.close(2)

    # a saved report without its session: gpudoctor warns (on stderr) and renders it
    saved = tmp_path / "saved.json"
    saved.write_bytes(subprocess.run([*GPUDOCTOR, "report", str(SESSION), "--format", "json"], capture_output=True,
                                     timeout=120, check=True).stdout)
    warned = subprocess.run([*GPUDOCTOR, "report", str(saved), "--format", "json"], capture_output=True,
                            timeout=120, check=True)
    assert b"warning" in warned.stderr
    proc = subprocess.run([*GPUDOCTOR, "report", str(saved), "--format", "json"], stdout=subprocess.PIPE,
                          stderr=None, stdin=subprocess.DEVNULL, preexec_fn=close_stderr, timeout=120, check=False)
    assert proc.returncode == 0
    json.loads(proc.stdout)  # only the JSON: the warning is not mixed into it
    missing = subprocess.run([*GPUDOCTOR, "report", str(tmp_path / "missing.json")], stdout=subprocess.PIPE,
                             stderr=None, stdin=subprocess.DEVNULL, preexec_fn=close_stderr, timeout=120, check=False)
    assert missing.returncode == 66 and missing.stdout == b""
