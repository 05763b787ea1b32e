"""The fault-test harness itself: it must tell gpudoctor's crash from the workload's,
wherever the clone lives (git names a clone of gpudoctor `gpudoctor/`)."""

from __future__ import annotations

from pathlib import Path

import pytest

import gpudoctor

from .conftest import Run, own_frames


def _saved_run(out: Path, stderr: str) -> Run:
    out.mkdir(parents=True)
    for suffix in (".json", ".html", ".session.json"):
        (out / f"raises-1{suffix}").write_text("{}")
    return Run(1, "", stderr, out)


def test_workload_traceback_in_a_clone_named_gpudoctor_is_not_ours(tmp_path: Path) -> None:
    workload = tmp_path / "gpudoctor" / "tests" / "faults" / "workloads" / "raises.py"
    stderr = (
        "Traceback (most recent call last):\n"
        f'  File "{workload}", line 5, in <module>\n'
        "    raise RuntimeError('fault')\n"
        "RuntimeError: fault\n"
        "gpudoctor: workload crashed: RuntimeError: fault after 1.0s; writing the report\n"
    )
    _saved_run(tmp_path / "reports", stderr).assert_saved()


def test_a_frame_in_gpudoctors_own_code_is_a_crash_of_ours(tmp_path: Path) -> None:
    own = Path(gpudoctor.__file__).resolve().parent / "pipeline.py"
    stderr = (
        "Traceback (most recent call last):\n"
        f'  File "{own}", line 9, in finish\n'
        "ValueError: boom\n"
        "gpudoctor: workload exited with code 0 after 1.0s; writing the report\n"
    )
    assert own_frames(stderr) == [str(own)]
    with pytest.raises(AssertionError):
        _saved_run(tmp_path / "reports", stderr).assert_saved()
