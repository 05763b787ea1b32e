"""`gpudoctor sweep` end to end on CPU: real trial processes, JSON + HTML, OOM, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from html import unescape
from pathlib import Path

import pytest

from gpudoctor.base import exitcodes
from gpudoctor.cli import main

TINY = str(Path(__file__).with_name("tiny_model.py"))
FAST = ["--device", "cpu", "--min-time-s", "0.1", "--max-time-s", "1", "--warmup-s", "0.05"]


@pytest.fixture(autouse=True)
def one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # trial processes inherit it: OpenMP threads spinning on a busy 2-core CI machine
    # would turn microseconds into milliseconds
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("TINY_OOM_ABOVE", raising=False)
    monkeypatch.delenv("TINY_STICKY_AT", raising=False)


def sweep(*args: str) -> int:
    return main(["sweep", *args])


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("gpudoctor: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.integration
def test_explicit_sizes_write_json_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tiny"
    code = sweep(f"{TINY}:build", "--mode", "infer", "--batch-sizes", "1,2,4", *FAST, "--out", str(out), "--json", "-",
                 "--html", str(tmp_path / "copy.html"))
    captured = capsys.readouterr()
    assert code == exitcodes.OK, captured.err
    report = json.loads(captured.out)  # --json - : the JSON on stdout, the table on stderr
    assert report == json.loads((tmp_path / "tiny.json").read_text())
    assert report["schema"] == "gpudoctor.sweep/1"
    assert [(t["batch_size"], t["status"]) for t in report["trials"]] == [(1, "ok"), (2, "ok"), (4, "ok")]
    assert all(t["timing"]["iterations"] >= 20 for t in report["trials"])
    assert [t["process_reused"] for t in report["trials"]] == [False, True, True]  # far from any memory edge
    assert report["target"]["mode"] == "infer" and report["device"]["type"] == "cpu"
    assert report["command"][:5] == ["gpudoctor", "sweep", f"{TINY}:build", "--mode", "infer"]
    assert report["files"] == {"html": "tiny.html", "json": "tiny.json"}
    assert set(report["recommendations"]) == {"offline", "online"}
    assert "batch      4:" in captured.err and "samples/s" in captured.err
    html = unescape((tmp_path / "tiny.html").read_text())
    assert (tmp_path / "copy.html").read_text() == (tmp_path / "tiny.html").read_text()
    assert "default-src 'none'; style-src 'unsafe-inline'; img-src data:" in html
    assert html.count("<svg") >= 3 and "http://" not in html and "https://" not in html
    # never over an existing report: refused before anything runs
    assert (
        sweep(f"{TINY}:build", "--mode", "infer", "--batch-sizes", "1", *FAST, "--out", str(out))
        == exitcodes.OUTPUT_EXISTS
    )
    assert "already exists" in one_line_error(capsys)


@pytest.mark.integration
def test_search_finds_the_memory_edge_after_a_simulated_oom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TINY_OOM_ABOVE", "1")  # build() raises torch.cuda.OutOfMemoryError above 1
    code = sweep(
        f"{TINY}:build", "--mode", "infer", "--max-batch", "64", *FAST, "--out", str(tmp_path / "edge"), "--quiet"
    )
    assert code == exitcodes.OK, capsys.readouterr().err
    report = json.loads((tmp_path / "edge.json").read_text())
    ran = sorted((t["order"], t["batch_size"], t["status"]) for t in report["trials"])
    assert ran == [(0, 1, "ok"), (1, 2, "oom")]  # nothing between 1 and 2 to bisect
    assert report["trials"][1]["message"].startswith("OutOfMemoryError: CUDA out of memory")
    edge = report["results"]["memory_edge"]
    assert edge["found"] and (edge["largest_fit"], edge["smallest_oom"]) == (1, 2)
    assert report["stop_reason"].startswith("out of memory at batch 2")
    assert "out of memory" in (tmp_path / "edge.html").read_text()


@pytest.mark.integration
def test_a_function_returning_the_wrong_thing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = sweep(f"{TINY}:wrong_return", "--mode", "infer", *FAST, "--out", str(tmp_path / "x"), "--quiet")
    assert code == exitcodes.BAD_DATA
    assert "returned int" in one_line_error(capsys)
    assert not list(tmp_path.iterdir())  # bad input: no report


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["missing.py:build", "--mode", "infer"], exitcodes.NOT_FOUND, "no such file"),
        ([f"{TINY}:nope", "--mode", "infer"], exitcodes.NOT_FOUND, "no function or class named 'nope'"),
        ([f"{TINY}:TinyNet", "--mode", "infer"], exitcodes.USAGE, "--input-shape"),
        ([TINY, "--mode", "infer"], exitcodes.USAGE, "FILE.py:FUNCTION"),
        ([f"{TINY}:build"], exitcodes.USAGE, "--mode"),
        ([f"{TINY}:build", "--mode", "infer", "--batch-sizes", "8,x"], exitcodes.USAGE, "not a whole number"),
        ([f"{TINY}:build", "--mode", "infer", "--batch-sizes", "8,0"], exitcodes.USAGE, "must be positive"),
        ([f"{TINY}:build", "--mode", "infer", "--batch-sizes", "8,,16"], exitcodes.USAGE, "comma-separated"),
        ([f"{TINY}:build", "--mode", "infer", "--batch-sizes", "8", "--max-batch", "64"], exitcodes.USAGE, "not both"),
        (
            [f"{TINY}:build", "--mode", "infer", "--start", "64", "--max-batch", "8"],
            exitcodes.USAGE,
            "above --max-batch",
        ),
        ([f"{TINY}:build", "--mode", "infer", "--device", "tpu"], exitcodes.USAGE, "--device"),
        ([f"{TINY}:build", "--mode", "infer", "--headroom", "1.5"], exitcodes.USAGE, "fraction"),
    ],
)
def test_bad_input_is_one_line(args: list[str], code: int, words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep(*args) == code
    assert words in one_line_error(capsys)


def test_syntax_error_in_the_target_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def build(:\n")
    assert sweep(f"{broken}:build", "--mode", "infer") == exitcodes.NOT_RUNNABLE
    assert "syntax error" in one_line_error(capsys)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_output_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert sweep(f"{TINY}:build", "--mode", "infer", "--out", str(locked / "r")) == exitcodes.CANNOT_WRITE
    one_line_error(capsys)


def test_output_under_a_file_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("x")
    assert sweep(f"{TINY}:build", "--mode", "infer", "--out", str(tmp_path / "afile" / "r")) == exitcodes.CANNOT_WRITE
    assert "cannot" in one_line_error(capsys)


def test_existing_html_copy_is_refused_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    taken = tmp_path / "mine.html"
    taken.write_text("the user's own file")
    code = sweep(f"{TINY}:build", "--mode", "infer", "--out", str(tmp_path / "r"), "--html", str(taken))
    assert code == exitcodes.OUTPUT_EXISTS
    assert "already exists" in one_line_error(capsys)
    assert taken.read_text() == "the user's own file"


@pytest.mark.integration
def test_sigterm_ends_the_sweep_and_still_reports(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "gpudoctor",
        "sweep",
        f"{TINY}:slow_build",
        "--mode",
        "infer",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "cut"),
    ]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert "one process per size" in child.stderr.readline()  # the handler is in place from here
    time.sleep(0.5)  # let the first trial start
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 130
    report = json.loads((tmp_path / "cut.json").read_text())
    assert report["interrupted"] and report["stop_reason"] == "interrupted (Ctrl-C or SIGTERM)"
    assert (tmp_path / "cut.html").exists()
