"""Bad input to the real CLI: corrupt, truncated, empty, huge or hostile files given to
report, diff and analyze; unknown and conflicting options; non-UTF-8 paths and
arguments. Each gets one line on stderr and a documented exit code: never a
traceback, never a hang (every call runs under a timeout)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from gpudoctor.base import exitcodes

from .conftest import WORKLOADS, cli, main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "h200"
SESSION = FIXTURES / "starved_loader.session.json"
TRACE = FIXTURES / "traces" / "copies.json.gz"
DOCUMENTED = {code for code, _ in exitcodes.TABLE}


def one_line_error(proc, code: int, words: str = "") -> str:
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == code, (proc.returncode, err)
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpudoctor: error: "), err
    assert words in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("bad")
    raw = SESSION.read_bytes()
    files = {
        "empty": b"",
        "truncated": raw[: len(raw) // 2],
        "corrupt": b"\x89PNG\r\n\x1a\n\x00\x00garbage\xff\xfe",
        "not-json-utf8": b'{"schema": "gpudoctor.session/1", "command": ["\xff"]}',
        "deep": b"[" * 200_000,
        "wrong-schema": json.dumps({"schema": "someone.else/3"}).encode(),
        "wrong-types": json.dumps({"schema": "gpudoctor.session/1", "steps": {"count": "many"}}).encode(),
        "newer-schema": json.dumps({"schema": "gpudoctor.session/9"}).encode(),
        "hostile-report": json.dumps({"schema": "gpudoctor.report/1", "duration_s": "soon",
                                      "findings": [{"id": "<script>", "severity": "fatal"}]}).encode(),
        "list": b"[1, 2, 3]",
        "nan": b'{"schema": "gpudoctor.session/1", "duration_s": NaN, "exit_code": 1e999}',
    }
    paths = {}
    for name, data in files.items():
        paths[name] = where / f"{name}.json"
        paths[name].write_bytes(data)
    huge = where / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(300 << 20)  # sparse: 300 MiB of zeros that take no disk
    paths["huge"] = huge
    return paths


@pytest.mark.parametrize("name", ["empty", "truncated", "corrupt", "not-json-utf8", "deep", "wrong-schema",
                                  "wrong-types", "newer-schema", "hostile-report", "list", "nan"])
def test_report_refuses_bad_files(bad_files, name):
    one_line_error(main("report", str(bad_files[name]), "--format", "json"), exitcodes.BAD_DATA)


@pytest.mark.integration
@pytest.mark.parametrize("name", ["empty", "deep", "huge"])
def test_report_refuses_bad_files_in_a_real_process(bad_files, name):
    one_line_error(cli("report", str(bad_files[name]), "--format", "json"), exitcodes.BAD_DATA)


@pytest.mark.integration
@pytest.mark.parametrize("name", ["truncated", "hostile-report"])
def test_diff_refuses_bad_files(bad_files, name):
    one_line_error(main("diff", str(SESSION), str(bad_files[name])), exitcodes.BAD_DATA)
    one_line_error(cli("diff", str(bad_files[name]), str(SESSION)), exitcodes.BAD_DATA)


@pytest.mark.parametrize("name", ["empty", "truncated", "corrupt", "deep", "wrong-schema", "list"])
def test_analyze_refuses_bad_traces(bad_files, name):
    one_line_error(main("analyze", str(bad_files[name]), "--json", "-"), exitcodes.BAD_DATA)


def test_analyze_refuses_a_truncated_gzip_trace(tmp_path):
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(TRACE.read_bytes()[:5000])
    one_line_error(main("analyze", str(cut), "--json", "-"), exitcodes.BAD_DATA, "gzip")


@pytest.mark.integration
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_endless_input_is_bounded_not_a_hang(device):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    one_line_error(cli("report", device, "--format", "json", timeout=60), exitcodes.BAD_DATA, "larger than")


@pytest.mark.integration
def test_input_through_a_fifo(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(b'{"schema": "gpudoctor.session/1", "steps": 3}'))
    writer.start()
    one_line_error(cli("report", str(fifo), "--format", "json", timeout=60), exitcodes.BAD_DATA, "malformed")
    writer.join(timeout=10)  # read once: a second read of a FIFO would wait forever


def test_missing_and_directory_inputs(tmp_path):
    one_line_error(main("report", str(tmp_path / "nope.json")), exitcodes.NOT_FOUND, "no such file")
    one_line_error(main("analyze", str(tmp_path / "nope.json")), exitcodes.NOT_FOUND, "no such file")
    one_line_error(main("report", str(tmp_path)), exitcodes.BAD_DATA, "is a directory")
    one_line_error(main("diff", str(tmp_path / "a.json"), str(SESSION)), exitcodes.NOT_FOUND)


def test_a_symbolic_link_loop_is_named_as_such(tmp_path):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    loop = str(tmp_path / "a.json")
    for args in (["analyze", loop], ["report", loop], ["diff", loop, str(SESSION)], ["diagnose", loop]):
        one_line_error(main(*args), exitcodes.NOT_FOUND, "symbolic link loop")


@pytest.mark.parametrize("args, words", [
    (["--bogus"], "unrecognized"),
    (["report", str(SESSION), "--bogus"], "unrecognized"),
    (["diff", str(SESSION), str(SESSION), "--bogus"], "unrecognized"),
    (["analyze", str(TRACE), "--bogus"], "unrecognized"),
    (["diagnose", "--bogus", "x.py"], "unrecognized"),
    (["diagnose", "--duration", "-3", "x.py"], "positive"),
    (["diagnose", "--steps", "0", "x.py"], "positive"),
    (["diagnose", "--interval", "nan", "x.py"], "between"),
    (["diagnose", "--interval", "1e-9", "x.py"], "between 0.05 and 60"),  # would busy-loop the samplers
    (["diagnose", "--interval", "86400", "x.py"], "between 0.05 and 60"),
    (["report", str(SESSION), "--format", "pdf"], "invalid choice"),
    (["nosuchcommand"], "invalid choice"),
    (["diff", str(SESSION)], "required"),
    (["diff", str(SESSION), str(SESSION), str(SESSION)], "unrecognized"),
    # conflicting options
    (["analyze", str(TRACE), "--json", "-", "--format", "html"], "needs --out"),
    (["diagnose", "--json", "/", str(WORKLOADS / "sys_exit.py")], "not a directory"),
    (["diagnose", "-m"], "needs a module"),
])
def test_unknown_and_conflicting_options(args, words):
    one_line_error(main(*args), exitcodes.USAGE, words)


@pytest.mark.integration
def test_unknown_option_in_a_real_process():
    one_line_error(cli("diagnose", "--bogus", "x.py"), exitcodes.USAGE, "unrecognized")


@pytest.mark.integration
def test_unknown_option_that_is_not_utf8():
    one_line_error(cli(b"--\xff\xfe"), exitcodes.USAGE, "unrecognized")
    one_line_error(cli("report", str(SESSION), "--format", b"\xff"), exitcodes.USAGE, "invalid choice")


@pytest.mark.integration
def test_non_utf8_paths_for_report(tmp_path):
    odd = os.fsencode(tmp_path) + b"/run-\xff\xfe.session.json"
    shutil.copyfile(SESSION, odd)
    proc = cli("report", odd, "--out", os.fsencode(tmp_path) + b"/out-\xff/")
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    written = os.listdir(os.fsencode(tmp_path) + b"/out-\xff")
    assert len(written) == 3, written  # html, json, session
    proc = cli("report", odd, "--format", "json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["schema"] == "gpudoctor.report/1"
    one_line_error(cli("report", os.fsencode(tmp_path) + b"/missing-\xff.json"), exitcodes.NOT_FOUND, "no such file")
    one_line_error(cli("analyze", odd, "--json", "-"), exitcodes.BAD_DATA, "not a profiler trace")


@pytest.mark.integration
def test_non_utf8_script_path_and_arguments_for_diagnose(tmp_path):
    script = os.fsencode(tmp_path) + b"/exit-\xff.py"
    shutil.copyfile(WORKLOADS / "sys_exit.py", script)
    out = os.fsencode(tmp_path) + b"/reports-\xfe/"
    proc = cli("diagnose", "--quiet", "--out", out, script, b"7", b"\xff\xfe-arg", timeout=120)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 7, err
    assert "Traceback" not in err and "could not render" not in err, err
    names = sorted(os.listdir(out))
    assert [n.rsplit(b".", 1)[-1] for n in names] == [b"html", b"json", b"json"], names
    report = json.loads((Path(os.fsdecode(out)) / os.fsdecode(names[1])).read_text(encoding="utf-8"))
    assert report["exit_code"] == 7
    assert report["command"][-1] == "\udcff\udcfe-arg"  # written as \\udcff escapes: the same string back


@pytest.mark.integration
def test_report_of_a_session_with_non_utf8_command_to_stdout(tmp_path):
    data = json.loads(SESSION.read_text())
    data["command"] = ["python", "train-\udcff.py"]
    path = tmp_path / "odd.session.json"
    path.write_text(json.dumps(data))  # ensure_ascii: the surrogate is stored as an escape
    for fmt in ("json", "terminal", "html"):
        # strict, as stdout is under most UTF-8 locales (C.UTF-8 would hide the problem)
        proc = cli("report", str(path), "--format", fmt, env={"PYTHONIOENCODING": "utf-8:strict"})
        assert proc.returncode == 0, (fmt, proc.stderr)
        assert b"Traceback" not in proc.stderr
