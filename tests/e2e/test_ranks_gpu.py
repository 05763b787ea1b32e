"""On one NVIDIA GPU: `gpudoctor diagnose -- torchrun --nproc-per-node 1` with NCCL gives a sane one-rank report.

The two-GPU run with a slowed rank is documented in tests/workloads/gpu/ddp_ranks.py
(it needs a machine with two GPUs).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from .conftest import WORKLOADS


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0


pytestmark = [pytest.mark.gpu, pytest.mark.integration,
              pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU")]


def test_one_rank_nccl_job(diagnose):
    run = diagnose("--", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                   str(WORKLOADS / "gpu" / "ddp_ranks.py"), timeout=300, env={"DDP_STEPS": "150"})
    assert run.returncode == 0, run.stderr
    ranks = run.report["ranks"]
    assert len(ranks["rows"]) == 1 and ranks["rows"][0]["rank"] == 0 and ranks["world_size"] == 1
    row = ranks["rows"][0]
    assert row["backend"] == "nccl"
    assert row["step_time_s"] and row["step_time_s"] > 0
    assert row["gpu_busy_percent"] is not None and row["gpu_busy_percent"] > 0
    # one rank: nothing to compare, said so
    assert run.outcome("GD501")["status"] == "skipped"
    assert "one rank" in run.outcome("GD501")["reason"]
    # DDP with one rank runs no all-reduce kernels; if NCCL kernels are there they are measured
    assert run.outcome("GD502")["status"] in ("skipped", "pass", "finding")
