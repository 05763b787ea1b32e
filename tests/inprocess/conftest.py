"""Helpers for the in-process API tests: a tiny CPU training loop and torch's patch points."""

from __future__ import annotations

import importlib
import time

import pytest

torch = pytest.importorskip("torch")

# every owner whose attributes the agent might patch: compared before and after a watch
OWNERS = (
    ("torch", ""),
    ("torch", "Tensor"),
    ("torch.nn", "Module"),
    ("torch.optim", "Optimizer"),
    ("torch.cuda", ""),
    ("torch.utils.data.dataloader", "_BaseDataLoaderIter"),
    ("torch.utils.data.dataloader", "DataLoader"),
    ("torch.utils.data._utils.fetch", "_MapDatasetFetcher"),
    ("torch.utils.data._utils.fetch", "_IterableDatasetFetcher"),
)
REGISTRIES = (
    ("torch.optim.optimizer", "_global_optimizer_post_hooks"),
    ("torch.optim.optimizer", "_global_optimizer_pre_hooks"),
    ("torch.nn.modules.module", "_global_forward_pre_hooks"),
    ("torch.nn.modules.module", "_global_forward_hooks"),
)


def torch_state() -> dict:
    """Identity of every attribute of the patchable owners, and the hook registries' keys."""
    state = {}
    for module, path in OWNERS:
        owner = importlib.import_module(module)
        for part in filter(None, path.split(".")):
            owner = getattr(owner, part)
        for name, value in list(vars(owner).items()):
            state[(module, path, name)] = id(value)
    for module, name in REGISTRIES:
        state[(module, name)] = tuple(getattr(importlib.import_module(module), name).keys())
    return state


def state_changes(before: dict, after: dict) -> list:
    """Entries that existed before and differ now (new lazily-imported attributes are fine)."""
    return [key for key, value in before.items() if key in after and after[key] != value]


def train(steps: int = 40, *, sleep_s: float = 0.002, batch_size: int = 8) -> float:
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * batch_size, 16), torch.randn(steps * batch_size, 1))
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = torch.zeros(())
    for x, y in DataLoader(data, batch_size=batch_size):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(sleep_s)
    return float(loss.detach())


@pytest.fixture(scope="session", autouse=True)
def warm_torch():
    """torch patches itself on first use (the first optimizer step imports dynamo, which
    replaces torch.manual_seed): warm it up before any test compares torch's state."""
    train(2, sleep_s=0.0)
