"""Fault workload with torch and a DataLoader: workers that die, or the spawn start method.

    loader.py ok               iterate a few batches with 2 forked workers; exit 0
    loader.py worker-dies      a worker is SIGKILLed mid-epoch (as the OOM killer does)
    loader.py worker-raises    a worker's Dataset raises
    loader.py spawn            multiprocessing start method "spawn" (one worker, a fresh interpreter)
    loader.py hang             8 batches in the main process, then hangs (sleeps forever)
"""

import multiprocessing
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"


class Samples(Dataset):
    def __init__(self, mode):
        self.mode = mode

    def __len__(self):
        return 64

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        if info is not None and i >= 24:
            if self.mode == "worker-dies":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.mode == "worker-raises":
                raise OSError(f"fault: sample {i} is unreadable")
        time.sleep(0.002)
        return torch.full((8,), float(i)), i % 2


def main():
    context = None
    if MODE == "spawn":
        multiprocessing.set_start_method("spawn")  # workers are fresh interpreters, not forks
        context = "spawn"
    weight = torch.zeros(8)
    workers = {"spawn": 1, "hang": 0}.get(MODE, 2)  # a spawned worker imports torch anew: keep it to one
    loader = DataLoader(Samples(MODE), batch_size=4, num_workers=workers, multiprocessing_context=context)
    steps = 0
    for x, y in loader:  # no torch.optim: creating an optimizer imports torch._dynamo (seconds)
        weight += 0.01 * (x.mean(0) - y.float().mean())
        steps += 1
        if MODE == "hang" and steps == 8:
            print("hanging after 8 steps", flush=True)
            while True:
                time.sleep(3600)
    print(f"trained {steps} steps", flush=True)


if __name__ == "__main__":
    main()
