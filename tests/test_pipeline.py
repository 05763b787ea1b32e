"""The end of `diagnose` (pipeline.finish) on a synthetic Session, in process."""

from __future__ import annotations

import argparse
import datetime

from helpers import make_loader, make_session, make_steps

from gpudoctor import exitcodes, pipeline
from gpudoctor.output import plan_outputs


def starved_session():
    """A clean run (exit 0) whose loop waited for data 60% of each step: critical findings."""
    loader = make_loader(num_workers=0, batches=50, batch_size=64, fetch_s_per_batch=0.060, fetch_cpu_ratio=0.9)
    return make_session(steps=make_steps(50, 0.100, 0.060), loaders=[loader], usable_cores=8, torch_cuda_used=True,
                        exit_code=0, stop_reason="exited")


def test_a_quiet_failed_gate_says_which_findings_failed_it(tmp_path, capsys) -> None:
    """Issue 27, item 21: `--quiet --fail-on critical` exited 3 with no line saying why."""
    plan = plan_outputs(str(tmp_path) + "/", "run", datetime.datetime(2026, 1, 2, 3, 4, 5))
    args = argparse.Namespace(ignore=[], fail_on="critical", quiet=True, force=False)
    assert pipeline.finish(starved_session(), args, plan) == exitcodes.FAIL_ON
    lines = capsys.readouterr().err.splitlines()
    gate = [line for line in lines if "--fail-on" in line]
    assert len(gate) == 1, lines
    assert gate[0].startswith("gpudoctor: --fail-on critical failed: ")
    assert "GD102" in gate[0] and "critical" in gate[0]
