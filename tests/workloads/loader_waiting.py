"""Workload: the dataset waits (simulated slow storage: sleeps per sample), CPUs idle.

Known answer: GD102 classified as waiting (not CPU-bound); GD103 silent.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowStorage(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        time.sleep(0.004)  # a remote read: the CPU does nothing meanwhile
        return torch.randn(64), i % 4


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowStorage(), batch_size=8, num_workers=args.workers)
    for step, (x, y) in enumerate(loader, 1):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= args.steps:
            break
    print(f"trained {step} steps")


if __name__ == "__main__":
    main()
