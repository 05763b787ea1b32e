"""`gpudoctor diagnose` on the input-bound loop of tests/workloads/input_bound_entry.py under
Lightning and accelerate, and `gpudoctor analyze` of its own torch.profiler trace: each
reports the data stall and a worker count (the in-process doors: tests/integrations/test_entry_points.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from .conftest import WORKLOADS

pytestmark = pytest.mark.integration  # every test here starts a process

WORKLOAD = str(WORKLOADS / "input_bound_entry.py")


def _worker_count(finding: dict) -> int:
    match = re.search(r"num_workers=(\d+)", finding["remedy"]["code"] or "")
    assert match, finding["remedy"]
    return int(match.group(1))


@pytest.mark.parametrize("mode", ["lightning", "accelerate"])
def test_diagnose_finds_the_stall_under_the_framework(diagnose, mode):
    pytest.importorskip("lightning" if mode == "lightning" else "accelerate")
    run = diagnose(WORKLOAD, mode, "--steps", "40")
    assert run.returncode == 0, run.stderr
    report = run.report
    assert report["summary"]["verdict"].startswith("Input-bound"), report["summary"]["verdict"]
    assert run.finding("GD102") is not None
    workers = run.finding("GD101")
    assert workers is not None and _worker_count(workers) >= 1
    advice = {f["id"]: f["remedy"]["text"] for f in report["findings"] if f["remedy"]}
    assert not any("Do not add workers" in text for text in advice.values()), advice  # one remedy per knob


def test_analyze_of_the_loops_own_profiler_trace(tmp_path):
    traces = tmp_path / "traces"
    subprocess.run([sys.executable, WORKLOAD, "profile", "--steps", "16", "--trace", str(traces)], check=True,
                   capture_output=True, timeout=300)
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "analyze", str(traces), "--json", "-", "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["summary"]["verdict"].startswith("Input-bound"), report["summary"]["verdict"]
    stall = next(f for f in report["findings"] if f["id"] == "GD102")
    assert stall["evidence"]["stall_kind"]["value"] == "cpu-bound"
    workers = next(f for f in report["findings"] if f["id"] == "GD101")
    assert _worker_count(workers) >= 1
