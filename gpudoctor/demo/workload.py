"""A small image-classification training loop with a real input-pipeline problem.

Every sample goes through CPU-heavy preprocessing (a stack of blur passes, as an
augmentation pipeline would do), and the DataLoader runs it in the training
process itself (num_workers=0). The model step is cheap, so the loop spends most of
each step waiting for data. Runs on the GPU when there is one, else on the CPU.

    python -m gpudoctor.demo.workload [--workers N] [--steps N] [--batch-size N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class AugmentedImages(Dataset[tuple[torch.Tensor, int]]):
    """Synthetic 3x64x64 images; the per-sample "augmentation" costs a few ms of CPU."""

    def __init__(self, size: int = 100_000, passes: int = 12) -> None:
        self.size = size
        self.passes = passes
        self.kernel = torch.full((3, 1, 5, 5), 1.0 / 25)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(1, 3, 96, 96, generator=generator)
        for _ in range(self.passes):  # the expensive part: heavy per-sample CPU work
            image = F.conv2d(F.pad(image, (2, 2, 2, 2), mode="reflect"), self.kernel, groups=3)
        return image[0, :, 16:80, 16:80].contiguous(), index % 10


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core for the loop; the rest is the loader's to use
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = model().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loader = DataLoader(AugmentedImages(), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, pin_memory=device.type == "cuda")
    for step, (images, labels) in enumerate(loader, 1):
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        loss = F.cross_entropy(net(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call, unused-ignore]
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step}: loss {loss.item():.3f}", flush=True)
        if step >= args.steps:
            break
    print(f"trained {step} steps on {device.type}")


if __name__ == "__main__":
    main()
