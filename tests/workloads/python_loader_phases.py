"""Workload: batches made in the loop's own process (num_workers=0) by Python-heavy items, two loaders.

Each item runs a few hundred small Python calls (what a chain of transforms makes), so a profiler
window that records Python stacks traces hundreds of thousands of calls a second, and torch's stop
of that window holds the loop for seconds (about 5 us a traced call). The second loader is a new
phase, due a window of its own: after the first window's long stop, gpudoctor records it without
Python stacks (agent/profiler.STOP_HELD_S), and its stop takes a fraction of a second.

Prints each loader's time: under `gpudoctor diagnose` they hold the windows' stops.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class PythonItems(Dataset):
    def __init__(self, calls: int) -> None:
        self.calls = calls

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> torch.Tensor:
        value = 0
        for k in range(self.calls):
            value = abs(value - k)
        return torch.full((16,), float(value % 7))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400, help="Python calls per item")
    parser.add_argument("--steps", type=int, default=800, help="steps per loader")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    model = torch.nn.Linear(16, 4).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for name in ("first", "second"):
        loader = DataLoader(PythonItems(args.calls), batch_size=64, num_workers=0)
        began = time.perf_counter()
        for i, batch in enumerate(loader):
            loss = model(batch.to(device)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i + 1 == args.steps:
                break
        print(f"{name} loader: {args.steps} steps in {time.perf_counter() - began:.1f} s", flush=True)


if __name__ == "__main__":
    main()
