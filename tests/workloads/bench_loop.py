"""Benchmark workload: a fixed number of training steps; prints the loop's own time as JSON.

    python bench_loop.py --device cpu|cuda --steps N [--loader-workers W]

With --loader-workers, each step's batch comes from a DataLoader whose samples cost CPU
work (an input-bound loop: what makes gpudoctor profile where a loader worker spends its time).
"""

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, Dataset


class CpuHeavy(Dataset):
    """Samples that cost CPU work each (blur passes, as augmentation does)."""

    def __init__(self, width):
        self.width = width
        self.kernel = torch.full((1, 1, 5), 0.2)

    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        x = torch.rand(1, 1, self.width * 16)
        for _ in range(8):
            x = torch.nn.functional.conv1d(x, self.kernel, padding=2)
        return x.view(16, self.width)[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=0)
    parser.add_argument("--loader-workers", type=int, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # stable timings on a shared machine: one core, no thread contention
    width = args.width or (4096 if device.type == "cuda" else 256)
    batch = 4096 if device.type == "cuda" else 128
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)).to(
        device
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    for _ in range(10):  # warm-up outside the timed loop
        model(x).mean().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    batches = None
    if args.loader_workers is not None:
        loader = DataLoader(CpuHeavy(width), batch_size=batch, num_workers=args.loader_workers)
        batches = iter(loader)
        next(batches)  # workers started outside the timed loop
    start = time.perf_counter()
    for _ in range(args.steps):
        if batches is not None:
            x = next(batches).to(device)
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(json.dumps({"loop_s": elapsed, "steps": args.steps, "device": device.type}))


if __name__ == "__main__":
    main()
