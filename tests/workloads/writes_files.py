"""Workload for `--try` in a scratch directory: reads an input beside it, overwrites a
checkpoint and appends to a log in its working directory, and (WRITE_TO set) writes one
more file at that absolute path, or (WRITE_BESIDE_SCRIPT) beside the script itself."""

import os
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset


class SlowStorage(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.randn(16), i % 4


def main():
    data = Path("inputs/data.txt").read_text().strip()  # an input, relative to the working directory
    torch.set_num_threads(1)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(DataLoader(SlowStorage(), batch_size=8, num_workers=0), 1):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= 30:
            break
    torch.save({"step": step, "weight": model.weight.detach()}, "ckpt.pt")
    with open("history.log", "a") as log:
        log.write(f"run {os.getpid()} read {data}\n")
    if os.environ.get("WRITE_TO"):
        Path(os.environ["WRITE_TO"]).write_text("written\n")
    if os.environ.get("WRITE_BESIDE_SCRIPT"):
        (Path(sys.argv[0]).resolve().parent / "beside.txt").write_text(f"{os.getpid()}\n")
    print(f"trained {step} steps")


if __name__ == "__main__":
    main()
