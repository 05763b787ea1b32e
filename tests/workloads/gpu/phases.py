"""GPU workload: a longer run with a phase change: training epochs, then an evaluation pass.

Training: a DataLoader and an optimizer, two epochs. Evaluation: another DataLoader,
model.eval() and torch.no_grad(), with .cpu() and .item() per batch. Known answer: more than one
profiler window: "start" in the first epoch, "later" in the second (when --profile-later
is shorter than an epoch), "phase" for the evaluation; a finding of the evaluation
window (GD302: its syncs per batch) says it holds only in that phase.

    python phases.py [--epoch-s S] [--eval-s S] [--device cuda|cpu]
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, n: int, width: int) -> None:
        self.n, self.width = n, width

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return torch.full((self.width,), float(i % 5)), i % 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epoch-s", type=float, default=8.0)
    parser.add_argument("--eval-s", type=float, default=6.0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    width = 1024 if cuda else 64
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                                torch.nn.GELU(), torch.nn.Linear(width, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    train = DataLoader(Synthetic(10**6, width), batch_size=128, shuffle=True, num_workers=2, pin_memory=cuda)
    evaluate = DataLoader(Synthetic(10**6, width), batch_size=256, num_workers=2, pin_memory=cuda)
    for epoch in range(args.epochs):
        model.train()
        deadline = time.time() + args.epoch_s
        for x, y in train:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if time.time() > deadline:
                break
        print(f"epoch {epoch}: loss {float(loss.detach()):.3f}", flush=True)
    model.eval()
    correct = seen = 0
    deadline = time.time() + args.eval_s
    with torch.no_grad():
        for x, y in evaluate:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            predicted = model(x).argmax(1).cpu()  # two syncs per batch: .cpu() and .item()
            correct += int((predicted == y.cpu()).sum().item())
            seen += len(y)
            if time.time() > deadline:
                break
    print(f"accuracy {correct / max(seen, 1):.3f}")


if __name__ == "__main__":
    main()
