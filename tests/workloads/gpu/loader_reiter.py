"""GPU workload: a GPU-bound bf16 MLP fed by a loader that re-creates its iterator often.

The shape that showed an observer effect (issue 24): 6 x Linear(8192, 8192) in bf16 on
4096 rows gathered from a buffer already on the device, fed by a DataLoader whose
workers collate 4,096 single indices per batch (``persistent_workers=True``) and a new
iterator every ``--iter-batches`` batches. The loader is about as fast as the GPU step,
so its waits overlap queued GPU work.

Prints one JSON line at the end: steps, the steady throughput (steps/s over the steps
after ``--warmup``) and the data wait per step (median), so a benchmark can compare runs.
``--device cpu`` stands a sleep of ``--cpu-step-ms`` in for the GPU step (the same loader).
``--pin-cpus A,B,C`` runs the loop's thread on CPU A and worker i on the (i+2)th CPU of the list
(a benchmark's two configs then compute on the same cores, whatever the host's scheduler does).
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


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (Linux; None elsewhere)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _workers(iterator) -> tuple[float | None, list[dict]]:
    """User and system seconds the loader's live worker processes have used, and per worker its
    seconds and the CPU it last ran on (Linux's /proc; None and [] elsewhere, or without workers)."""
    workers = getattr(iterator, "_workers", None) or []
    total, each = 0.0, []
    for worker in workers:
        fields = _stat(worker.pid)
        if fields is None:
            return None, []
        seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        total += seconds
        each.append({"cpu_s": round(seconds, 2), "last_cpu": int(fields[36])})
    return (total if workers else None), each


def _pin_worker(worker_id: int) -> None:
    cpus = os.environ["LOADER_REITER_PIN"].split(",")  # the first is the loop's (empty: not pinned)
    os.sched_setaffinity(0, {int(cpus[1 + worker_id % (len(cpus) - 1)] if len(cpus) > 1 else cpus[0])})


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
    parser.add_argument("--pin-cpus", help="CPUs: the loop's thread on the first, worker i on the (i+2)th")
    args = parser.parse_args()
    init = None
    if args.pin_cpus:  # this thread only: threads started before (an agent's) keep the whole machine
        os.environ["LOADER_REITER_PIN"] = args.pin_cpus
        loop_cpu = args.pin_cpus.split(",")[0]
        if loop_cpu:  # ",2,3": the workers only
            os.sched_setaffinity(0, {int(loop_cpu)})
        init = _pin_worker
    device = torch.device(args.device)
    rows = 65536
    gpu = device.type == "cuda"
    if gpu:
        width = 8192
        buffer = torch.randn(rows, width, device=device, dtype=torch.bfloat16)
        # made on the GPU: initialising 400M weights on the CPU took seconds of every run's set-up
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width, device=device, dtype=torch.bfloat16)
                                      for _ in range(6)])
        opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    loader = DataLoader(Indices(rows, args.item == "tensor"), batch_size=args.batch, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0 and not args.no_persistent,
                        worker_init_fn=init)
    stamps: list[float] = []
    waits: list[float] = []
    iters: list[float] = []  # time to create each iterator (new workers start there)
    firsts: list[bool] = []  # per wait: the first batch of its iterator
    copies: list[float] = []  # the index's copy to the GPU: pageable, so it waits for the steps queued before
    enqueues: list[float] = []  # the step's host time (forward, backward, optimizer), GPU work queued
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
                t1 = time.perf_counter()
                on_gpu = index.to(device, non_blocking=True)
                t2 = time.perf_counter()
                x = buffer[on_gpu]
                loss = model(x).float().pow(2).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                copies.append(t2 - t1)
                enqueues.append(time.perf_counter() - t2)
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
    workers_cpu, workers = _workers(it) if not args.no_persistent else (None, [])
    main_cpu = time.process_time()
    main_stat = _stat("thread-self")
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
                      "main_cpu_s": round(main_cpu, 2),
                      # the GPU's side: the copy waits for the queued steps; a slower GPU step shows here
                      "copy_ms_median": _median_ms(copies[args.warmup:]),
                      "enqueue_ms_median": _median_ms(enqueues[args.warmup:]),
                      "main_last_cpu": int(main_stat[36]) if main_stat else None,
                      "workers": workers}))


def _median_ms(values: list[float]) -> float | None:
    return round(statistics.median(values) * 1e3, 3) if values else None


if __name__ == "__main__":
    main()
