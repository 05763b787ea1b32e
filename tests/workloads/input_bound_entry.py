"""Workload: one input-bound training loop, run through each of gpudoctor's entry points.

Heavy per-sample CPU work in ``__getitem__`` and ``num_workers=0`` (``--workers N`` is the
fix): the loop waits for data most of each step. Known answer for every mode: GD102
(input stall, CPU-bound) and GD101 with a concrete ``num_workers``.

    python input_bound_entry.py plain       # a plain loop (`gpudoctor diagnose` on it)
    python input_bound_entry.py lightning   # the same model and data in a LightningModule
    python input_bound_entry.py accelerate  # the loop over accelerate's prepared DataLoader
    python input_bound_entry.py profile --trace DIR [--unmarked]  # torch.profiler, tensorboard_trace_handler

The callbacks' tests import `HeavyDataset`, `Net` and `LitNet` from here.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

BATCH_SIZE = 16


class HeavyDataset(Dataset):
    """Synthetic 3x64x64 images; a few ms of CPU blur passes per sample (`passes` blurs with a
    `size` x `size` kernel: one large pass makes the same work in fewer profiler events)."""

    def __init__(self, n: int = 4096, passes: int = 10, size: int = 5) -> None:
        self.n = n
        self.passes = passes
        self.pad = size // 2
        self.kernel = torch.full((3, 1, size, size), 1 / size**2)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = torch.rand(1, 3, 64, 64)
        for _ in range(self.passes):
            x = F.conv2d(F.pad(x, (self.pad,) * 4), self.kernel, groups=3)
        return x[0], i % 10


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # about 25 ms a step on one core against about 65 ms to make a batch: one worker pays (~1.4x)
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                                        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def loader(workers: int, dataset: Dataset | None = None) -> DataLoader:
    return DataLoader(dataset or HeavyDataset(), batch_size=BATCH_SIZE, shuffle=True, num_workers=workers)


class HeavyStream(torch.utils.data.IterableDataset):
    """HeavyDataset's samples as a stream without a length: Lightning's fetcher then prefetches."""

    def __iter__(self) -> Any:
        heavy = HeavyDataset()
        return (heavy[i] for i in range(len(heavy)))


def lit_net(workers: int, data: str = "loader") -> Any:
    """The LightningModule; `data`: "loader" (one DataLoader), "combined" (a dict of two: a
    CombinedLoader), "stream" (an IterableDataset without a length: the prefetching fetcher)."""
    import lightning.pytorch as pl

    class LitNet(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = Net()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            pairs = list(batch.values()) if isinstance(batch, dict) else [batch]
            return sum(F.cross_entropy(self.net(x), y) for x, y in pairs)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self) -> Any:
            if data == "combined":
                return {"heavy": loader(workers), "more": loader(workers)}
            if data == "stream":
                return DataLoader(HeavyStream(), batch_size=BATCH_SIZE, num_workers=workers)
            return loader(workers)

    return LitNet()


def lightning_trainer(steps: int, callbacks: list[Any], root: str | None = None) -> Any:
    import lightning.pytorch as pl

    return pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, callbacks=callbacks, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, default_root_dir=root)


def train_plain(steps: int, workers: int, data: Any = None, on_step: Any = None) -> None:
    net = Net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    for step, (x, y) in enumerate(data if data is not None else loader(workers), 1):
        loss = F.cross_entropy(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if on_step is not None:
            on_step()
        if step >= steps:
            break


def train_accelerate(steps: int, workers: int) -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    net = Net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    net, optimizer, data = accelerator.prepare(net, optimizer, loader(workers))
    for step, (x, y) in enumerate(data, 1):
        loss = F.cross_entropy(net(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        if step >= steps:
            break


def train_profiled(steps: int, workers: int, trace_dir: str, marked: bool = True) -> None:
    """torch.profiler on CPU, its trace in `trace_dir` as tensorboard_trace_handler names it:
    `marked`, a schedule and prof.step() per step (ProfilerStep#N ranges); else start/stop around
    the loop after 3 warm-up steps (no ranges but the DataLoader's). One large blur per sample
    (37 x 37: about the CPU time of the default ten 5 x 5 passes, measured) in a tenth of the events."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    data = loader(workers, HeavyDataset(passes=1, size=37))
    handler = tensorboard_trace_handler(trace_dir)
    if marked:
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=2, active=steps - 3),
                     on_trace_ready=handler) as prof:
            train_plain(steps, workers, data=data, on_step=prof.step)
        return
    batches = iter(data)
    train_plain(3, workers, data=batches)
    prof = profile(activities=[ProfilerActivity.CPU], on_trace_ready=handler)
    prof.start()
    train_plain(steps - 3, workers, data=batches)
    prof.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("plain", "lightning", "accelerate", "profile"))
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--trace", default="traces")
    parser.add_argument("--unmarked", action="store_true", help="profile: no ProfilerStep ranges")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one core for the loop; the rest is the loader's
    if args.mode == "plain":
        train_plain(args.steps, args.workers)
    elif args.mode == "lightning":
        lightning_trainer(args.steps, []).fit(lit_net(args.workers))
    elif args.mode == "accelerate":
        train_accelerate(args.steps, args.workers)
    else:
        train_profiled(args.steps, args.workers, args.trace, marked=not args.unmarked)
    print(f"trained {args.steps} steps ({args.mode})")


if __name__ == "__main__":
    main()
