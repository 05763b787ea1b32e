"""GPU workload: no module, no step: 400 small host tensors shipped to the GPU one by one per iteration.

Nothing marks a step (no nn.Module, DataLoader, optimizer or backward), so the profiler
window is time-bounded, opened at one of the loop's own tensor copies on the main thread.
Known answer: GD303 (many small copies, each a pageable synchronous transfer) with
per-second numbers; GD302 for the syncs each pageable copy makes.

    python small_copies.py [--seconds S] [--count N]
"""

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--count", type=int, default=400)
    args = parser.parse_args()
    device = torch.device("cuda")
    host = [torch.randn(64) for _ in range(args.count)]  # 256 bytes each, pageable
    total = torch.zeros(64, device=device)
    iterations = 0
    deadline = time.time() + args.seconds
    while time.time() < deadline:
        for tensor in host:
            total += tensor.to(device)  # one small pageable copy, then a tiny kernel
        iterations += 1
    torch.cuda.synchronize()
    print(f"iterations {iterations}, total {float(total.sum()):.1f}")


if __name__ == "__main__":
    main()
