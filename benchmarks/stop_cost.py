"""What a profiler window's stop costs per Python call, and how well one counted step predicts it.

A window that records Python stacks (torch.profiler's `with_stack=True`) holds the loop at its
stop for a time that grows with the Python calls it traced. The agent counts one warm-up step of
each phase and, where that count predicts a stop of `profile_stop_held_s` (2 s) or
more, opens the window without stacks (gpudoctor/agent/profiler.py: StepCount, STOP_S_PER_CALL).
This measures, for loops of known shape, on the machine it runs on:

- the Python calls of one step, as the agent counts them (StepCount: Python and builtin calls)
  and how much the count slowed that step;
- the stop of a window of `--steps` steps with stacks (torch's stop and the trace's export), and
  its cost per counted call: the value STOP_S_PER_CALL stands for;
- the stop STOP_S_PER_CALL predicts, against the measured one.

Loops (CPU only, one thread; each step is a whole training step):
`items-N`: a `num_workers=0` DataLoader whose items make N small Python calls each (the items of
tests/workloads/python_loader_phases.py, batch 64,
Linear(16, 4), SGD); `modules-N`: N blocks of Linear(32, 32) + LayerNorm + GELU, batch 8, AdamW.

    python benchmarks/stop_cost.py [--steps 10] [--repeat 3] [--loops items-100,items-400,...]

Prints one JSON line per loop and repeat, then the median cost per call per loop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.data import DataLoader

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "workloads"))

from python_loader_phases import PythonItems  # noqa: E402 (after the path: items of N Python calls)

from gpudoctor.agent.profiler import STOP_S_PER_CALL, StepCount  # noqa: E402

DEFAULT_LOOPS = "items-100,items-400,items-1600,modules-24,modules-96"


def _items(calls: int) -> Callable[[], None]:
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(DataLoader(PythonItems(calls), batch_size=64, num_workers=0))

    def step() -> None:
        loss = model(next(batches)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def _modules(blocks: int) -> Callable[[], None]:
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.LayerNorm(32),
                                                      torch.nn.GELU()) for _ in range(blocks)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 32)

    def step() -> None:
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def _loop(name: str) -> Callable[[], None]:
    kind, _, size = name.partition("-")
    if kind == "items":
        return _items(int(size))
    if kind == "modules":
        return _modules(int(size))
    raise SystemExit(f"stop_cost.py: unknown loop {name!r} (items-N or modules-N)")


def measure(name: str, steps: int, directory: Path) -> dict[str, object]:
    from torch.profiler import ProfilerActivity, profile

    step = _loop(name)
    for _ in range(5):
        step()
    began = time.perf_counter()
    step()
    plain = time.perf_counter() - began
    counter = StepCount("explicit", ())
    step()
    counter.end()
    counted, calls = counter.took, counter.calls
    prof = profile(activities=[ProfilerActivity.CPU], with_stack=True)
    prof.start()
    began = time.perf_counter()
    for _ in range(steps):
        step()
    traced = (time.perf_counter() - began) / steps
    began = time.perf_counter()
    prof.stop()
    prof.export_chrome_trace(str(directory / f"{name}.json"))
    held = time.perf_counter() - began
    return {"loop": name, "calls_per_step": calls, "step_ms": round(plain * 1e3, 3),
            "counted_step_ms": round(counted * 1e3, 3), "traced_step_ms": round(traced * 1e3, 3),
            "window_steps": steps, "stop_s": round(held, 3), "us_per_call": round(held / (calls * steps) * 1e6, 2),
            "predicted_stop_s": round(calls * steps * STOP_S_PER_CALL, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="steps in each window")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--loops", default=DEFAULT_LOOPS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    per_loop: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for name in args.loops.split(","):
                row = measure(name, args.steps, Path(tmp))
                per_loop.setdefault(name, []).append(float(row["us_per_call"]))  # type: ignore[arg-type]
                print(json.dumps(row), flush=True)
    print(json.dumps({"median_us_per_call": {k: statistics.median(v) for k, v in per_loop.items()},
                      "STOP_S_PER_CALL_us": STOP_S_PER_CALL * 1e6}))


if __name__ == "__main__":
    main()
