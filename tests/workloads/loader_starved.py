"""Workload: CPU-heavy per-sample preprocessing in the training process (num_workers=0).

Known answer: the loop waits for data most of each step (GD102, CPU-bound) and the
DataLoader needs workers (GD101). `--workers N` is the fixed version.
"""

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class HeavyDataset(Dataset):
    def __init__(self, n=4096, passes=10):
        self.n = n
        self.passes = passes
        self.kernel = torch.full((3, 1, 5, 5), 1 / 25)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.rand(1, 3, 80, 80)
        for _ in range(self.passes):
            x = F.conv2d(F.pad(x, (2, 2, 2, 2)), self.kernel, groups=3)
        return x[0], i % 10


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 80 * 80, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(HeavyDataset(), batch_size=16, num_workers=args.workers)
    for step, (x, y) in enumerate(loader, 1):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= args.steps:
            break
    print(f"trained {step} steps")


if __name__ == "__main__":
    main()
