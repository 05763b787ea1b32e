"""Sweep targets that make a real GPU fail on purpose (tests/sweep/test_gpu.py, on a GPU).

memory_hog: each sample holds 4 GiB on the device, so the memory edge sits near a
    quarter of the card's memory in GiB and a real CUDA out-of-memory ends the search.
device_assert: from batch 4 an embedding index is out of range, which trips a
    device-side assert: a sticky CUDA error the sweep must report and never retry.
"""

from __future__ import annotations

import torch
from torch import nn

SAMPLE_BYTES = 4 * 2**30


def memory_hog(batch_size: int | None = None):
    def make_batch(n: int, device: torch.device | None = None):
        return torch.randn(n, 8, device=device), torch.empty(n, SAMPLE_BYTES, dtype=torch.uint8, device=device)

    return {"model": nn.Linear(8, 8), "make_batch": make_batch, "forward": lambda m, batch: m(batch[0])}


def device_assert(batch_size: int | None = None):
    def make_batch(n: int, device: torch.device | None = None):
        return torch.full((n,), 1000 if n >= 4 else 3, dtype=torch.long, device=device)

    return nn.Embedding(10, 8), make_batch
