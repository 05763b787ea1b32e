"""Two tiny CPU workloads in the corpus manifest's form (the runner's smoke test, tests/benchmarks)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"))
from manifest import Remedy, Workload

SYN = "{corpus}/synthetic.py"
LOADER = ("loader", "--device", "cpu", "--workers", "0", "--item-us", "1500", "--batch", "8")
MLP = ("mlp", "--device", "cpu", "--batch", "4", "--width", "64", "--layers", "4")

WORKLOADS = (
    Workload("cpu_loader", SYN, LOADER, ("GD101", "GD102"),
             (Remedy("1 worker", ("GD101", "GD102"), ("loader", "--device", "cpu", "--workers", "1", "--item-us",
                                                       "1500", "--batch", "8")),),
             # 120 steps of about 12 ms: the profiler window opens after 50 steps on a CPU run (or 1 s)
             # and needs 0.3 s, so it opens and closes on a fast machine too (40 steps opened none)
             max_steps=120, max_seconds=15.0),
    Workload("cpu_small_batch", SYN, MLP, ("GD202",),
             (Remedy("batch 32", ("GD202",), ("mlp", "--device", "cpu", "--batch", "32", "--width", "64", "--layers",
                                              "4"), step_scale=8.0),),
             max_steps=60, max_seconds=15.0),
)
