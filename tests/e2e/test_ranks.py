"""End to end: `gpudoctor diagnose -- torchrun ...` on a gloo DDP job with 2-3 CPU ranks.

One rank is slowed on purpose (tests/workloads/ddp_ranks.py): the straggler check must
name it and the cause found on it; a healthy job must not flag one; torchrun's own
launcher process must not record a rank.
"""

from __future__ import annotations

import sys

import pytest

from .conftest import WORKLOADS

pytestmark = pytest.mark.integration  # every test here starts a process

DDP = str(WORKLOADS / "ddp_ranks.py")


def _torchrun(diagnose, nproc: int, **env: str):
    return diagnose("--", sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc-per-node={nproc}", DDP, env={"DDP_STEPS": "30", **env}, timeout=120)


def test_slowed_rank_is_found_with_its_cause(diagnose):
    run = _torchrun(diagnose, 2, DDP_SLOW_RANK="1", DDP_SLOW_KIND="compute", DDP_SLOW_S="0.03")
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    report = run.report
    straggler = run.finding("GD501")
    assert straggler is not None, [f["id"] for f in report["findings"]]
    assert straggler["evidence"]["rank"]["value"] == 1
    assert straggler["evidence"]["cause"]["value"] == "host"
    # the sleep is 30 ms per step: the excess measured must be of that order
    assert 20 <= straggler["evidence"]["excess"]["value"] <= 60
    assert run.finding("GD504") is None  # its data path is as fast as the others'
    ranks = report["ranks"]
    assert [row["rank"] for row in ranks["rows"]] == [0, 1]
    assert ranks["worst_rank"] == 1 and ranks["primary_rank"] == 0 and ranks["world_size"] == 2
    assert ranks["rows"][1]["own_time_s"] > 5 * ranks["rows"][0]["own_time_s"]
    assert all(row["backend"] == "gloo" for row in ranks["rows"])
    assert ranks["worst_timeline"]["duration_s"]
    # gloo on CPU: no NCCL kernels, the communication check says why it did not run
    assert "gloo" in run.outcome("GD502")["reason"]
    # torchrun's launcher is instrumented too but is no rank
    ranked = [p for p in report["evidence"]["processes"] if p.get("rank") is not None]
    assert sorted(p["rank"] for p in ranked) == [0, 1]
    launcher = [p for p in report["evidence"]["processes"] if p["role"] == "main"]
    assert launcher and all(p.get("rank") is None for p in launcher)
    html = next(run.out.glob("*.html")).read_text()
    assert "Step time of rank 1" in html


def test_slow_data_path_on_one_rank_is_the_cause(diagnose):
    run = _torchrun(diagnose, 3, DDP_SLOW_RANK="2", DDP_SLOW_KIND="data", DDP_SLOW_S="0.03")
    assert run.returncode == 0, run.stderr
    straggler = run.finding("GD501")
    assert straggler is not None
    assert straggler["evidence"]["rank"]["value"] == 2
    assert straggler["evidence"]["cause"]["value"] == "data"
    starved = run.finding("GD504")
    assert starved is not None and starved["evidence"]["rank"]["value"] == 2
    assert starved["evidence"]["data_wait_share"]["value"] > 0.5
    assert len(run.report["ranks"]["rows"]) == 3


def test_healthy_job_has_no_straggler(diagnose):
    run = _torchrun(diagnose, 2)
    assert run.returncode == 0, run.stderr
    assert run.finding("GD501") is None
    assert run.finding("GD504") is None
    assert run.outcome("GD501")["status"] == "pass"
    assert len(run.report["ranks"]["rows"]) == 2


def test_ranks_of_torch_multiprocessing_spawn(diagnose):
    # no launcher sets RANK: each child's process group tells its rank
    run = diagnose("--", sys.executable, DDP, "--spawn", "2", timeout=180,
                   env={"DDP_STEPS": "30", "DDP_SLOW_RANK": "0", "DDP_SLOW_S": "0.03"})
    assert run.returncode == 0, run.stderr
    rows = run.report["ranks"]["rows"]
    assert [row["rank"] for row in rows] == [0, 1]
    straggler = run.finding("GD501")
    assert straggler is not None and straggler["evidence"]["rank"]["value"] == 0


def test_a_duration_stop_of_torchrun_is_a_stop_not_a_crash(diagnose):
    """issue 27 item 6: torchrun turns gpudoctor's SIGINT into its SignalException (exit 1)."""
    run = diagnose("--duration", "12", "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node=1", DDP, env={"DDP_STEPS": "100000"}, timeout=150)
    assert run.returncode == 0, run.stderr
    report = run.report
    assert report["stop_reason"] == "duration"
    assert run.finding("GD001") is None, run.finding("GD001")
    assert not report["summary"]["verdict"].startswith("Run failed"), report["summary"]["verdict"]
    assert "SignalException" not in run.stderr  # the traceback of a stop gpudoctor asked for is not shown
