"""The end of `diagnose` (pipeline.finish) on a synthetic Session, in process."""

from __future__ import annotations

import datetime
import subprocess
import sys

import pytest
from helpers import make_loader, make_session, make_steps

from gpudoctor import pipeline
from gpudoctor.base import exitcodes
from gpudoctor.session import ErrorEvent, ProcessInfo
from gpudoctor.verdict.output import plan_outputs


def starved_session():
    """A clean run (exit 0) whose loop waited for data 60% of each step: critical findings."""
    loader = make_loader(num_workers=0, batches=50, batch_size=64, fetch_s_per_batch=0.060, fetch_cpu_ratio=0.9)
    return make_session(steps=make_steps(50, 0.100, 0.060), loaders=[loader], usable_cores=8, torch_cuda_used=True,
                        exit_code=0, stop_reason="exited")


def test_a_quiet_failed_gate_says_which_findings_failed_it(tmp_path, capsys) -> None:
    """Issue 27, item 21: `--quiet --fail-on critical` exited 3 with no line saying why."""
    plan = plan_outputs(str(tmp_path) + "/", "run", datetime.datetime(2026, 1, 2, 3, 4, 5))
    options = pipeline.ReportOptions(fail_on="critical", quiet=True)
    assert pipeline.finish(starved_session(), options, plan) == exitcodes.FAIL_ON
    lines = capsys.readouterr().err.splitlines()
    gate = [line for line in lines if "--fail-on" in line]
    assert len(gate) == 1, lines
    assert gate[0].startswith("gpudoctor: --fail-on critical failed: ")
    assert "GD102" in gate[0] and "critical" in gate[0]


def _syntax_error_session(steps: int = 0):
    session = make_session(steps=make_steps(steps, 0.1) if steps else None, exit_code=1, stop_reason="exited",
                           processes=[ProcessInfo(pid=10, role="main", argv=["python", "train.py"])],
                           errors=[ErrorEvent(pid=10, kind="exception", type="SyntaxError", t=0.05,
                                              message="invalid syntax (train.py, line 3)")])
    return session


def test_a_script_that_does_not_compile_is_named_in_one_line() -> None:
    """Issue 27, item 22: a syntax error got a full report with 19 "skipped" lines."""
    assert pipeline.failed_before_running(_syntax_error_session()) == (
        "the script failed before it ran: SyntaxError: invalid syntax (train.py, line 3); nothing was measured, "
        "so no report was written")
    assert pipeline.failed_before_running(_syntax_error_session(steps=30)) is None  # it ran: a report of its own
    assert pipeline.failed_before_running(starved_session()) is None


@pytest.mark.integration
def test_diagnose_of_a_script_with_a_syntax_error(tmp_path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import os\ndef f(:\n    pass\n")
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "diagnose", "--out", f"{out}/", str(script)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == exitcodes.NOT_RUNNABLE, proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith("gpudoctor:")]
    assert ours[-1].startswith("gpudoctor: error: the script failed before it ran: SyntaxError: "), proc.stderr
    assert "skipped" not in proc.stderr
    assert not out.exists() or not any(out.iterdir())  # no empty report
