"""GPU workload: a GPU-bound bf16 MLP fed by a loader that re-creates its iterator often.

The shape that showed an observer effect (issue 24): 6 x Linear(8192, 8192) in bf16 on
4096 rows gathered from a buffer already on the device, fed by a DataLoader whose
workers collate 4,096 single indices per batch (``persistent_workers=True``) and a new
iterator every ``--iter-batches`` batches. The loader is about as fast as the GPU step,
so its waits overlap queued GPU work.

Prints one JSON line at the end: steps, the steady throughput (steps/s over the steps
after ``--warmup``) and the data wait per step (median), so a benchmark can compare runs.
``--device cpu`` stands a sleep of ``--cpu-step-ms`` in for the GPU step (the same loader).
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset


class Indices(Dataset):
    """Item i is the index itself: a plain int, or a 0-d tensor (``--item tensor``: about ten
    times the CPU work per item, so the workers take about as long as the GPU step)."""

    def __init__(self, n: int, as_tensor: bool) -> None:
        self.n, self.as_tensor = n, as_tensor

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.tensor(i) if self.as_tensor else i


def _workers_cpu_s(iterator) -> float | None:
    """User and system seconds the loader's live worker processes have used (Linux's /proc; None
    elsewhere, or without workers)."""
    workers = getattr(iterator, "_workers", None) or []
    total = 0.0
    for worker in workers:
        try:
            fields = Path(f"/proc/{worker.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total if workers else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--iter-batches", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--cpu-step-ms", type=float, default=15.0)
    parser.add_argument("--item", choices=("tensor", "int"), default="tensor")
    parser.add_argument("--no-persistent", action="store_true", help="new worker processes for every iterator")
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = 65536
    gpu = device.type == "cuda"
    if gpu:
        width = 8192
        buffer = torch.randn(rows, width, device=device, dtype=torch.bfloat16)
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(6)]).to(device, torch.bfloat16)
        opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    loader = DataLoader(Indices(rows, args.item == "tensor"), batch_size=args.batch, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0 and not args.no_persistent)
    stamps: list[float] = []
    waits: list[float] = []
    iters: list[float] = []  # time to create each iterator (new workers start there)
    firsts: list[bool] = []  # per wait: the first batch of its iterator
    done = 0
    while done < args.steps:
        t0 = time.perf_counter()
        it = iter(loader)
        iters.append(time.perf_counter() - t0)
        for k in range(args.iter_batches):
            t0 = time.perf_counter()
            try:
                index = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            firsts.append(k == 0)
            if gpu:
                x = buffer[index.to(device, non_blocking=True)]
                loss = model(x).float().pow(2).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            else:
                time.sleep(args.cpu_step_ms / 1e3)
            stamps.append(time.perf_counter())
            done += 1
            if done >= args.steps:
                break
    if gpu:
        torch.cuda.synchronize()
        stamps[-1] = time.perf_counter()
    # persistent workers: the last iterator's are the run's (new ones every iterator: not known)
    workers_cpu = _workers_cpu_s(it) if not args.no_persistent else None
    main_cpu = time.process_time()
    steady = stamps[args.warmup:]
    rate = (len(steady) - 1) / (steady[-1] - steady[0])
    first = [w for w, f in zip(waits[args.warmup:], firsts[args.warmup:]) if f] or [0.0]
    later = [w for w, f in zip(waits[args.warmup:], firsts[args.warmup:]) if not f] or [0.0]
    print(json.dumps({"steps": done, "steps_per_s": round(rate, 3),
                      "wait_ms_median": round(statistics.median(waits[args.warmup:]) * 1e3, 3),
                      # where a slower run lost its time: starting iterators, their first batch, the others
                      "iter_ms_median": round(statistics.median(iters[1:] or iters) * 1e3, 3),
                      "first_wait_ms_median": round(statistics.median(first) * 1e3, 3),
                      "later_wait_ms_median": round(statistics.median(later) * 1e3, 3),
                      # CPU per batch: whether a slow run's workers did more work, or got less of the CPU
                      "workers_cpu_ms_per_batch": (round(workers_cpu * 1e3 / done, 3)
                                                   if workers_cpu is not None else None),
                      "main_cpu_s": round(main_cpu, 2)}))


if __name__ == "__main__":
    main()
