"""--try's scratch working directory: what the diagnosed run wrote is copied, the rest linked;
writes no scratch directory can contain refuse the trials (issue 27 item 1)."""

from __future__ import annotations

import os
from pathlib import Path

from gpudoctor.collectors.events import WrittenPath
from gpudoctor.trials import scratch


def _project(root: Path) -> Path:
    (root / "inputs").mkdir(parents=True)
    (root / "inputs" / "data.txt").write_text("input\n")
    (root / "runs" / "old").mkdir(parents=True)
    (root / "history.log").write_text("earlier\n")
    (root / "ckpt.pt").write_bytes(b"plain run's checkpoint")
    return root


def test_written_files_are_copied_and_the_rest_linked(tmp_path: Path) -> None:
    work = _project(tmp_path / "work")
    before = scratch.before_run(str(work), [])
    (work / "history.log").write_text("earlier\nplain\n")  # a shell's append: seen by the listing
    writes = [WrittenPath(path=str(work / "ckpt.pt"), relative=True, cwd=str(work)),
              WrittenPath(path=str(work / "runs" / "new" / "events.out"), relative=True, cwd=str(work))]
    space = scratch.workspace(str(work), before, writes, [])
    assert space.refusal() is None
    assert space.inside >= {"ckpt.pt", "history.log", os.path.join("runs", "new", "events.out")}
    made = space.make()
    try:
        assert (made / "inputs").is_symlink() and (made / "inputs" / "data.txt").read_text() == "input\n"
        assert not (made / "ckpt.pt").is_symlink() and (made / "ckpt.pt").read_bytes() == b"plain run's checkpoint"
        assert not (made / "history.log").is_symlink()
        assert not (made / "runs").is_symlink() and (made / "runs" / "old").is_symlink()
        (made / "ckpt.pt").write_bytes(b"trial")
        with open(made / "history.log", "a") as log:
            log.write("trial\n")
        assert (work / "ckpt.pt").read_bytes() == b"plain run's checkpoint"
        assert (work / "history.log").read_text() == "earlier\nplain\n"
        assert space.leaked() == []
        (made / "inputs" / "data.txt").write_text("through a link")  # what the trial's agent refuses
        assert space.leaked() == [os.path.join("inputs", "data.txt")]
    finally:
        import shutil

        shutil.rmtree(made)


def test_writes_outside_the_working_directory_refuse_the_trials(tmp_path: Path, monkeypatch) -> None:
    work = _project(tmp_path / "work")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)
    before = scratch.before_run(str(work), [])
    elsewhere = str(tmp_path / "data" / "last.pt")
    writes = [WrittenPath(path=elsewhere, relative=False, cwd=str(work)),
              WrittenPath(path=str(tmp_path / "tmp" / "x"), relative=False, cwd=str(work))]
    space = scratch.workspace(str(work), before, writes, [])
    refusal = space.refusal()
    assert refusal is not None and elsewhere in refusal and "--try-in-place" in refusal
    assert space.outside == [elsewhere]  # the temporary file is no reason to refuse
