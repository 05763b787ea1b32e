"""Benchmark workload: a fixed number of training steps; prints the loop's own time as JSON.

    python bench_loop.py --device cpu|cuda --steps N
"""

import argparse
import json
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=0)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # stable timings on a shared machine: one core, no thread contention
    width = args.width or (4096 if device.type == "cuda" else 256)
    batch = 4096 if device.type == "cuda" else 128
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    for _ in range(10):  # warm-up outside the timed loop
        model(x).mean().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
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
