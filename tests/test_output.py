"""Output paths: decided and checked before the run, written without ever overwriting."""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.verdict import output
from gpudoctor.verdict.output import plan_outputs, write_outputs

NOW = datetime(2025, 1, 2, 3, 4, 5)
REPORT: dict[str, Any] = {
    "schema": "gpudoctor.report/1",
    "summary": {"verdict": "synthetic"},
    "findings": [],
    "checks": [],
}
SESSION: dict[str, Any] = {"schema": "gpudoctor.session/1", "source": "synthetic"}


def fake_render(report: Any, fmt: str) -> str:
    return json.dumps({"fmt": fmt, "files": report.get("files")})


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_default_is_gpudoctor_reports_in_cwd(in_tmp: Path) -> None:
    paths = plan_outputs(None, "train.py", NOW, ["html", "json"])
    assert paths.html == Path("gpudoctor-reports/train-20250102-030405.html")
    assert paths.json == Path("gpudoctor-reports/train-20250102-030405.json")
    assert paths.session == Path("gpudoctor-reports/train-20250102-030405.session.json")
    assert paths.trace == Path("gpudoctor-reports/train-20250102-030405.trace.json.gz")
    assert (in_tmp / "gpudoctor-reports").is_dir()  # created now, before the workload
    assert paths.relative_names()["html"] == "train-20250102-030405.html"


@pytest.mark.parametrize(
    ("out", "directory", "stem"),
    [
        ("results", "results", "train-20250102-030405"),  # an existing directory
        ("new-dir/", "new-dir", "train-20250102-030405"),  # a trailing slash: a directory
        ("runs/run1", "runs", "run1"),  # a file stem
        ("run1.html", ".", "run1"),
        ("runs/run1.json", "runs", "run1"),
        ("runs/run1.session.json", "runs", "run1"),
    ],
)
def test_out_as_directory_or_stem(in_tmp: Path, out: str, directory: str, stem: str) -> None:
    (in_tmp / "results").mkdir()
    paths = plan_outputs(out, "train", NOW, ["html", "json", "markdown", "junit"])
    assert (paths.directory, paths.stem) == (Path(directory), stem)
    assert paths.path("junit").name == f"{stem}.junit.xml" and paths.path("markdown").name == f"{stem}.md"
    assert paths.directory.is_dir()


def test_stem_is_made_file_safe() -> None:
    paths = plan_outputs(None, "../we ird/na:me?.py", NOW)
    assert paths.stem == "na_me-20250102-030405"


def test_existing_target_is_refused_unless_force(in_tmp: Path) -> None:
    (in_tmp / "run1.session.json").write_text("mine")
    with pytest.raises(GpudoctorError) as err:
        plan_outputs("run1", "train", NOW)
    assert err.value.code == exitcodes.OUTPUT_EXISTS == 74
    assert "run1.session.json" in str(err.value)
    paths = plan_outputs("run1", "train", NOW, force=True)
    written = write_outputs(paths, REPORT, SESSION, render=fake_render)
    assert json.loads((in_tmp / "run1.session.json").read_text()) == SESSION  # --force: replaced
    assert written.paths.stem == "run1"


def test_unwritable_directory_is_refused_before_the_run(in_tmp: Path) -> None:
    (in_tmp / "a-file").write_text("x")
    with pytest.raises(GpudoctorError) as err:
        plan_outputs("a-file/reports/", "train", NOW)
    assert err.value.code == exitcodes.CANNOT_WRITE == 73
    with pytest.raises(GpudoctorError) as err:
        plan_outputs("a-file/run1", "train", NOW)  # the parent is a file
    assert err.value.code == exitcodes.CANNOT_WRITE


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_read_only_directory_is_refused(in_tmp: Path) -> None:
    ro = in_tmp / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(GpudoctorError) as err:
            plan_outputs("ro/", "train", NOW)
        assert err.value.code == exitcodes.CANNOT_WRITE
    finally:
        ro.chmod(stat.S_IRWXU)


def test_write_outputs_writes_the_set_and_names_siblings(in_tmp: Path) -> None:
    paths = plan_outputs(None, "train", NOW, ["html", "json", "markdown"])
    written = write_outputs(paths, REPORT, SESSION, trace_bytes=b"\x1f\x8bfake", render=fake_render)
    names = {
        "html": "train-20250102-030405.html",
        "json": "train-20250102-030405.json",
        "markdown": "train-20250102-030405.md",
        "session": "train-20250102-030405.session.json",
        "trace": "train-20250102-030405.trace.json.gz",
    }
    assert written.report["files"] == names
    assert {k: p.name for k, p in written.files.items()} == names
    assert sorted(p.name for p in written) == sorted(names.values())  # iterable: the paths written
    html = json.loads((in_tmp / "gpudoctor-reports" / names["html"]).read_text())
    assert html == {"fmt": "html", "files": names}
    assert "files" not in REPORT  # the caller's dict is not modified
    assert not [p for p in (in_tmp / "gpudoctor-reports").iterdir() if p.name.startswith(".")]  # no temp files left


def test_reports_get_ordinary_file_permissions(in_tmp: Path) -> None:
    old = os.umask(0o022)
    try:
        written = write_outputs(plan_outputs(None, "train", NOW), REPORT, SESSION, render=fake_render)
    finally:
        os.umask(old)
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_name_taken_during_the_run_moves_to_a_suffix(in_tmp: Path) -> None:
    paths = plan_outputs(None, "train", NOW)
    taken = paths.json
    assert taken is not None
    taken.write_text("someone else's")
    written = write_outputs(paths, REPORT, SESSION, render=fake_render)
    assert written.paths.stem == "train-20250102-030405-1"
    assert taken.read_text() == "someone else's"  # never overwritten
    assert written.report["files"]["html"] == "train-20250102-030405-1.html"
    assert all(p.exists() for p in written)


def test_race_at_write_time_leaves_no_half_set(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = plan_outputs(None, "train", NOW)
    real = output.write_atomic
    raced: list[Path] = []

    def racing(path: Path, data: bytes, *, exclusive: bool = False) -> None:
        if not raced and path.name.endswith(".json") and not path.name.endswith(".session.json"):
            raced.append(path)
            path.write_text("appeared meanwhile")  # another run wins this name
        real(path, data, exclusive=exclusive)

    monkeypatch.setattr(output, "write_atomic", racing)
    written = write_outputs(paths, REPORT, SESSION, render=fake_render)
    assert written.paths.stem.endswith("-1")
    assert raced[0].read_text() == "appeared meanwhile"
    leftovers = sorted(p.name for p in paths.directory.iterdir())
    assert leftovers == sorted([raced[0].name, *(p.name for p in written)])  # nothing of the first attempt


def test_a_failing_renderer_costs_only_its_own_file(in_tmp: Path) -> None:
    def broken_html(report: Any, fmt: str) -> str:
        if fmt == "html":
            raise RuntimeError("template bug")
        return fake_render(report, fmt)

    written = write_outputs(plan_outputs(None, "train", NOW), REPORT, SESSION, render=broken_html)
    assert set(written.files) == {"json", "session"}
    assert "html" not in written.report["files"]


def test_formats_begun_ahead_are_taken_after_the_rest(in_tmp: Path) -> None:
    asked: list[str] = []

    def ahead(report: Any, fmt: str) -> bool:
        asked.append(f"ahead {fmt} {sorted(report['files'])}")  # the report as written: it names its files
        return fmt == "json"

    def render(report: Any, fmt: str) -> str:
        asked.append(f"render {fmt}")
        return fake_render(report, fmt)

    written = write_outputs(plan_outputs(None, "train", NOW), REPORT, SESSION, render=render, render_ahead=ahead)
    assert asked == ["ahead html ['html', 'json', 'session']", "ahead json ['html', 'json', 'session']",
                     "render html", "render json"]
    assert list(written.files) == ["html", "json", "session"]
    assert json.loads(written.files["json"].read_text())["fmt"] == "json"


def test_caller_written_trace_is_kept_and_json_copy_written(in_tmp: Path) -> None:
    paths = plan_outputs(None, "train", NOW, json_path="ci/report.json")
    assert paths.trace is not None
    paths.trace.write_bytes(b"trace written by the pipeline")
    written = write_outputs(paths, REPORT, SESSION, render=fake_render)
    assert written.files["trace"] == paths.trace and written.report["files"]["trace"] == paths.trace.name
    assert written.files["json_copy"] == Path("ci/report.json")
    assert json.loads(Path("ci/report.json").read_text())["fmt"] == "json"


def test_json_copy_that_exists_is_refused_before_the_run(in_tmp: Path) -> None:
    Path("report.json").write_text("{}")
    with pytest.raises(GpudoctorError) as err:
        plan_outputs(None, "train", NOW, json_path="report.json")
    assert err.value.code == exitcodes.OUTPUT_EXISTS


def test_real_renderers_by_default(in_tmp: Path) -> None:
    from gpudoctor.session import Session
    from gpudoctor.verdict.build import build_report
    from gpudoctor.verdict.engine import EngineResult

    report = build_report(Session(source="synthetic", command=["python", "train.py"]), EngineResult([], []), docs={})
    written = write_outputs(plan_outputs(None, "train", NOW, ["html", "json", "junit"]), report, SESSION)
    page = written.files["html"].read_text()
    assert "Content-Security-Policy" in page and "train-20250102-030405.json" in page
    assert json.loads(written.files["json"].read_text())["files"]["junit"] == "train-20250102-030405.junit.xml"


def test_moved_set_renames_the_trace_the_profile_points_to(in_tmp: Path) -> None:
    paths = plan_outputs(None, "train", NOW)
    assert paths.trace is not None and paths.html is not None
    paths.html.write_text("taken meanwhile")
    report = {**REPORT, "evidence": {"profile": {"trace_file": paths.trace.name}}}
    session = {**SESSION, "profile": {"trace_file": paths.trace.name}}
    written = write_outputs(paths, report, session, trace_bytes=b"gz", render=lambda r, f: json.dumps(r))
    new_name = "train-20250102-030405-1.trace.json.gz"
    assert written.files["trace"].name == new_name
    assert json.loads(written.files["json"].read_text())["evidence"]["profile"]["trace_file"] == new_name
    assert json.loads(written.files["session"].read_text())["profile"]["trace_file"] == new_name
    assert report["evidence"]["profile"]["trace_file"] == paths.trace.name  # the caller's dict is untouched
