"""`gpudoctor analyze DIR`: a tensorboard_trace_handler directory (one trace per rank),
analysed in parallel, one report with every rank's window."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpudoctor.base import exitcodes
from gpudoctor.cli import main
from gpudoctor.commands.analyze import session_from_trace
from gpudoctor.run import forking

pytestmark = pytest.mark.integration  # worker processes / the CLI in a subprocess

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "traces"


@pytest.fixture
def rank_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "log"
    directory.mkdir()
    shutil.copy(TRACES / "copies.json.gz", directory / "host_1234.1700000000000.pt.trace.json.gz")
    shutil.copy(TRACES / "host_sync.json.gz", directory / "host_1235.1700000000001.pt.trace.json.gz")
    (directory / "notes.txt").write_text("not a trace")
    return directory


def test_every_rank_is_analysed_with_its_own_numbers(rank_dir: Path) -> None:
    session = session_from_trace(rank_dir)
    alone = [session_from_trace(TRACES / name).profile for name in ("copies.json.gz", "host_sync.json.gz")]
    assert len(session.profiles) == 2
    for profile, single in zip(session.profiles, alone):
        assert profile.kernel_count == single.kernel_count and profile.gpu_busy_us == single.gpu_busy_us
        assert profile.sync_count == single.sync_count and profile.label == "rank"
    assert [p.phase for p in session.profiles] == sorted(p.name for p in rank_dir.glob("*.pt.trace.json.gz"))
    assert session.profile is session.profiles[0]


def test_the_same_numbers_in_one_process(rank_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parallel = session_from_trace(rank_dir)
    monkeypatch.setattr(forking, "usable_cores", lambda: 1)
    serial = session_from_trace(rank_dir)
    both = [serial.to_dict()["profiles"], parallel.to_dict()["profiles"]]
    for profiles in both:
        for profile in profiles:
            profile["replay"].pop("seconds")  # the replay's own run time
    assert both[0] == both[1]


def test_one_report_shows_every_rank(rank_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(rank_dir), "--json", "-", "--quiet"]) == exitcodes.OK
    report = json.loads(capsys.readouterr().out)
    assert [p["phase"] for p in report["evidence"]["profiles"]] == sorted(
        p.name for p in rank_dir.glob("*.pt.trace.json.gz"))
    assert any(f["id"] == "GD303" for f in report["findings"])  # rank 0 (copies) is judged


def test_a_directory_without_rank_traces_is_still_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(tmp_path)]) == exitcodes.NOT_FOUND
    assert "is a directory" in capsys.readouterr().err


def test_one_bad_rank_file_is_reported_and_skipped(rank_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 27 item 10: one bad file failed the whole directory."""
    (rank_dir / "host_1236.1700000000002.pt.trace.json").write_text('{"traceEvents": [{"ph": "X"')
    session = session_from_trace(rank_dir)
    assert len(session.profiles) == 2
    assert any("host_1236.1700000000002.pt.trace.json" in note and "skipped" in note and "not valid JSON" in note
               for note in session.notes)
    out = rank_dir.parent / "out"
    assert main(["analyze", str(rank_dir), "--out", f"{out}/", "--quiet"]) == exitcodes.OK
    assert "host_1236" in capsys.readouterr().err


def test_a_directory_of_only_bad_rank_files_is_bad_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.pt.trace.json").write_text("not json")
    (tmp_path / "b.pt.trace.json").write_text("")
    assert main(["analyze", str(tmp_path), "--quiet"]) == exitcodes.BAD_DATA
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a.pt.trace.json" in err[0]
