"""`pip install .`, `pip install -e .` and a plain checkout (no install) all find gpudoctor.checks
and gpudoctor.reports."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # every test here starts a process

ROOT = Path(__file__).resolve().parent.parent


def test_plain_checkout_imports_checks_and_reports(tmp_path):
    code = (
        "import gpudoctor.checks, gpudoctor.reports, gpudoctor.checks.gd102_input_stall as m;"
        "print(gpudoctor.checks.__file__); print(gpudoctor.reports.__file__); print(m.run.check.id)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout.split()
    assert Path(out[0]).resolve().parent == ROOT / "gpudoctor" / "checks"
    assert Path(out[1]).resolve().parent == ROOT / "gpudoctor" / "reports"
    assert out[2] == "GD102"


def test_wheel_contains_everything_and_runs(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("gpudoctor-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    metadata = zipfile.ZipFile(wheel)
    entry_points = next((metadata.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")), "")
    assert "gpudoctor.checks" not in entry_points  # the built-ins are found by scanning the package
    for expected in (
        "gpudoctor/checks/gd102_input_stall.py",
        "gpudoctor/reports/html.py",
        "gpudoctor/reports/templates/report.html",
        "gpudoctor/agent/_site/sitecustomize.py",
        "gpudoctor/demo/workload.py",
        "gpudoctor/schemas/report-v1.schema.json",
        "gpudoctor/schemas/sweep-v1.schema.json",
    ):
        assert expected in names, expected
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    code = (
        "import gpudoctor, gpudoctor.checks; from gpudoctor.verdict.registry import load_checks;"
        "checks, errors = load_checks(); assert not errors, errors;"
        "from gpudoctor import schemas; assert schemas.load('report-v1.schema.json') == schemas.report_schema();"
        "print(gpudoctor.__file__); print(len(checks)); print(checks[1].run.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout.split()
    assert out[0].startswith(str(target))
    assert int(out[1]) >= 16
    assert out[2] == "gpudoctor.checks.gd002_observer_effect"
