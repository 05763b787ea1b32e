"""Workload: a CPU training loop over an in-memory TensorDataset (num_workers=0).

Known answer: its items are already tensors in memory, so producing a batch in the
loop costs less than receiving one from a worker: gpudoctor must not advise adding
workers (issue 10 saw ``num_workers=1`` make such a loop 1.67x slower).
"""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(200_000, 32), torch.randint(0, 10, (200_000,)))
    loader = DataLoader(data, batch_size=64, shuffle=True, num_workers=args.workers)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
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
