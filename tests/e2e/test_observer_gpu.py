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


SHORT_LOOP_AFTER_A_QUIET_START = """
import time
import torch

model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(64, 256, device="cuda")
time.sleep(3.5)  # quiet since CUDA started: a time-bounded window is due
model(x)  # a safe point: it opens
time.sleep(0.5)
for _ in range(600):  # a short loop (well under 2 s): its first step discards the time window
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
"""


def test_a_short_loop_after_a_discarded_time_window_still_gets_its_step_window(diagnose, tmp_path):
    """The wait for CUPTI's detach after the discarded window ends with the loop's steps, not after
    a fixed 2 s that outlasted such a loop (H100: syn_launch_bound and fp32_matmul.py got no window)."""
    script = tmp_path / "short_loop.py"
    script.write_text(SHORT_LOOP_AFTER_A_QUIET_START)
    run = diagnose(str(script), timeout=300)
    assert run.returncode == 0, run.stderr
    session = json.loads(next(run.out.glob("*.session.json")).read_text())
    stepped = [p for p in session["profiles"] if p["steps"]]
    assert stepped and stepped[0]["step_source"] == "optimizer", (session["profiles"], session["unavailable"])
    assert stepped[0]["kernel_count"] > 0


NEW_WORKERS_EVERY_FOUR_BATCHES = """
import os
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
# one loader (one phase for the windows), whose every iterator forks two new workers
loader = DataLoader(TensorDataset(torch.randn(4096, 512)), batch_size=64, num_workers=2, sampler=range(256))
steps = 0
while steps < 160:
    for (x,) in loader:
        loss = model(x.cuda(non_blocking=True)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
torch.cuda.synchronize()
with open(sys.argv[1], "w") as out:
    out.write(os.environ.get("TEARDOWN_CUPTI", "unset"))
"""


def test_the_cupti_detach_ends_inside_the_windows_stop_while_workers_keep_starting(diagnose, tmp_path):
    """Kineto's detach ends on a thread of its own, which reads TEARDOWN_CUPTI again after a CUDA call;
    found unset, it re-attaches CUPTI's callbacks to every launch (H100: a loop that starts new workers
    every 4 batches ran at 0.58-0.64x plain under diagnose when the agent gave the variable back 3
    steps after a window). The window's stop now makes the runtime calls that let that thread finish,
    and waits for it to end, before the loop goes on (here: the fork of the next workers); only then
    is the variable given back. A detach not seen to end keeps it for the rest of the run."""
    script, seen = tmp_path / "new_workers.py", tmp_path / "teardown.txt"
    script.write_text(NEW_WORKERS_EVERY_FOUR_BATCHES)
    run = diagnose(str(script), str(seen), timeout=300)
    assert run.returncode == 0, run.stderr
    session = json.loads(next(run.out.glob("*.session.json")).read_text())
    stepped = [p for p in session["profiles"] if p["steps"] and p["kernel_count"]]
    assert stepped, (session["profiles"], session["unavailable"])
    details = [(p.get("cupti_detach"), p.get("cupti_detach_ms")) for p in session["profiles"]]
    assert all(how == "ended" for how, _ in details), details
    assert seen.read_text() == "unset", details
