"""GPU workload: a bf16 training loop fed by a DataLoader whose workers collate item by item.

Two shapes of one script (the loader is the same in both):

- ``--model big`` (default): each step keeps the GPU busy longer than two workers take
  to produce a batch. The loop still blocks in ``__next__`` most of each step, but
  only because it runs ahead of the GPU: the wait is hidden by queued GPU work.
  Known answer: GPU-bound, the data wait hidden (info), no input-bound verdict; more
  workers buy nothing measurable.
- ``--model tiny``: the same loader feeds a model that needs under a millisecond of
  GPU time per step. Known answer: input-bound (GD102 critical), GD101 names the
  workers the cores allow; more workers buy most of the predicted gain.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

# CPU work per item in the worker (a busy loop standing in for decode and augment): two workers
# then produce a batch about as fast as the big model's step consumes one on an H200
ITEM_COST_S = 0.0006


class Items(Dataset):
    def __init__(self, n: int, width: int) -> None:
        self.n, self.width = n, width

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        end = time.perf_counter() + ITEM_COST_S
        while time.perf_counter() < end:
            pass
        return torch.full((self.width,), float(i % 7)), i % 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("big", "tiny"), default="big")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    device = torch.device("cuda")
    width = 4096 if args.model == "big" else 256
    depth = 8 if args.model == "big" else 1
    batch = 64
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    loader = DataLoader(Items(batch * args.steps, width), batch_size=batch, num_workers=args.workers,
                        pin_memory=True, persistent_workers=args.workers > 0)
    # the big model's step: 8 layers x (64 x 4096 x 4096) is too little work per step on its own,
    # so each batch is repeated to fill the GPU (the same data, more matmul rows)
    repeat = 256 if args.model == "big" else 1
    for x, y in loader:
        x = x.to(device, non_blocking=True).repeat(repeat, 1)
        y = y.to(device, non_blocking=True).repeat(repeat)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
