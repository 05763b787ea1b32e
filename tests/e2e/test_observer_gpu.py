"""On one NVIDIA GPU: the loop of issue 24 under `gpudoctor diagnose` keeps its workers untraced.

A GPU-bound MLP fed by persistent DataLoader workers that a new iterator resumes every 4
batches. Before the fix, workers forked while a profiler window ran kept the profiler's
tracing for the whole run (35 steps/s plain, 11 under diagnose). The throughput itself is
compared in benchmarks/overhead.py, not here.
"""

from __future__ import annotations

import json

from .conftest import WORKLOADS
from .test_ranks_gpu import pytestmark  # noqa: F401 (gpu + integration, skipped without a GPU)


def test_the_loader_of_issue_24_is_not_slowed_by_the_window(diagnose):
    run = diagnose(str(WORKLOADS / "gpu" / "loader_reiter.py"), "--steps", "200", timeout=300)
    assert run.returncode == 0, run.stderr
    session = json.loads(next(run.out.glob("*.session.json")).read_text())
    workers = [p for p in session["processes"] if p["role"] == "worker"]
    assert len(workers) == 2 and not any(p["profiler_inherited"] for p in workers), workers
    assert session["profiles"], session["unavailable"]
    # CUPTI is detached after each window (TEARDOWN_CUPTI): a later window re-attaches and sees kernels
    stepped = [p for p in session["profiles"] if p["steps"]]
    assert stepped and all(p["kernel_count"] > 0 for p in stepped), session["profiles"]
    assert run.outcome("GD002")["status"] == "pass", run.report["findings"]
    overhead = run.report["summary"]["profiler_overhead"]
    assert overhead["windows"] >= 1 and overhead["profiled_steps"] > 0 and overhead["steps_per_s_inside"]
