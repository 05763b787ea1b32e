"""Fault workload with torch and a DataLoader: workers that die, or the spawn start method.

    loader.py ok [fork|spawn]      train a few steps; exit 0
    loader.py worker-dies          a worker is SIGKILLed mid-epoch (as the OOM killer does)
    loader.py worker-raises        a worker's Dataset raises
    loader.py mp-spawn             multiprocessing start method "spawn" set globally, a Pool too
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


def square(x):
    return x * x


def main():
    context = None
    if MODE == "mp-spawn":
        multiprocessing.set_start_method("spawn")
        with multiprocessing.Pool(1) as pool:
            assert pool.map(square, [1, 2, 3]) == [1, 4, 9]
        context = "spawn"
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Samples(MODE), batch_size=4, num_workers=2, multiprocessing_context=context)
    steps = 0
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    print(f"trained {steps} steps", flush=True)


if __name__ == "__main__":
    main()
