"""What the agent costs a stepless inference loop outside its windows: plain against diagnose.

A batch-1 forward of 37 small modules (12 x Linear(64, 64) + LayerNorm + GELU, then a
Linear), one CPU thread, 4,000 forwards: the shape where a per-module-call cost shows most.
Each run prints its median microseconds per forward over 30 chunks of 100 (the first 10
chunks left out); plain runs and `gpudoctor diagnose --no-profile --no-loader-profile` runs
(the step sources only: no window) alternate in pairs. Without the windows the difference
is what the agent's step sources cost each forward; the step harness of
benchmarks/overhead.py cannot show it, since its own global forward hooks put both sides of
its comparison on torch's hooked path.

    python benchmarks/forward_cost.py [--pairs 3]

Run without arguments on a quiet machine; `--loop` is the workload itself.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time


def loop() -> None:
    import torch

    torch.set_num_threads(1)
    layers: list[torch.nn.Module] = []
    for _ in range(12):
        layers += [torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 10)).eval()
    x = torch.randn(1, 64)
    chunks = []
    with torch.inference_mode():
        for _ in range(40):
            began = time.perf_counter()
            for _ in range(100):
                model(x)
            chunks.append((time.perf_counter() - began) / 100 * 1e6)
    print(f"us_per_forward {statistics.median(chunks[10:]):.2f}")


def run(diagnose: bool) -> float:
    command = [sys.executable, __file__, "--loop"]
    with tempfile.TemporaryDirectory() as out:
        if diagnose:
            command = [sys.executable, "-m", "gpudoctor", "diagnose", "--no-profile", "--no-loader-profile",
                       "--quiet", "--out", f"{out}/r/", "--", *command]
        text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    found = re.search(r"us_per_forward ([0-9.]+)", text)
    if found is None:
        raise SystemExit(f"no result in the output of {' '.join(command)}:\n{text}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        loop()
        return
    ratios = []
    for pair in range(args.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)  # alternated within pairs
        result = {kind: run(kind) for kind in order}
        ratios.append(result[True] / result[False])
        print(f"pair {pair + 1}: plain {result[False]:.1f} us, diagnose {result[True]:.1f} us per forward, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"median time ratio diagnose / plain over {len(ratios)} pairs: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
