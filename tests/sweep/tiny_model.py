"""Tiny sweep targets for the CPU tests: a model small enough to measure in a blink.

Environment knobs simulate what a CPU cannot produce on demand:
  TINY_OOM_ABOVE=N   build() raises torch.cuda.OutOfMemoryError above batch N
  TINY_STICKY_AT=N   build() raises a sticky "CUDA error: an illegal memory access" at batch N
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

FEATURES = 16


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def build(batch_size: int | None = None):
    size = batch_size or 1
    oom_above = int(os.environ.get("TINY_OOM_ABOVE", "0"))
    if oom_above and size > oom_above:
        raise torch.cuda.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {size} MiB (simulated above batch {oom_above})"
        )
    if int(os.environ.get("TINY_STICKY_AT", "0")) == size:
        raise RuntimeError("CUDA error: an illegal memory access was encountered (simulated)")
    return TinyNet(), lambda n: torch.randn(n, FEATURES)


def build_dict(batch_size: int | None = None):
    """The dict form, with a loss on targets carried in the batch."""
    model = TinyNet()
    return {
        "model": model,
        "make_batch": lambda n: {"x": torch.randn(n, FEATURES), "y": torch.randint(0, 4, (n,))},
        "forward": lambda m, batch: m(batch["x"]),
        "loss_fn": lambda out, batch: nn.functional.cross_entropy(out, batch["y"]),
    }


def just_a_module():
    return TinyNet()


def slow_build(batch_size: int | None = None):
    """Never finishes in a test's time: for interrupting a sweep mid-trial."""
    time.sleep(120)
    return build(batch_size)


def wrong_return(batch_size: int | None = None):
    return 42


def broken_build(batch_size: int | None = None):
    raise ValueError("the config file is missing")


NOT_CALLABLE = 3


WIDE = 256


def wide(batch_size: int | None = None):
    """Activations that dominate memory: batch 8192 holds tens of MB, batch 1 next to none
    (a peak that is per size shows the difference)."""
    return nn.Linear(WIDE, WIDE), lambda n: torch.randn(n, WIDE)
