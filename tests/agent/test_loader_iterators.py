"""The agent times DataLoader iterator creation (workers started each epoch) per loader."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data import dataloader as dl

from gpudoctor.agent.torch_hooks import TorchHooks


@pytest.fixture
def hooks():
    """TorchHooks with the DataLoader patched, torch's originals restored afterwards."""
    saved = (dl._BaseDataLoaderIter.__init__, dl._BaseDataLoaderIter.__next__, dl.DataLoader._get_iterator)
    events: list[tuple[str, dict]] = []
    agent = SimpleNamespace(config={}, emit=lambda kind, **f: events.append((kind, f)),
                            emit_steps=lambda steps: None, error=lambda where, exc: events.append((where, {})))
    h = TorchHooks(agent, torch)  # type: ignore[arg-type]
    h._patch_dataloader()
    h.events = events  # type: ignore[attr-defined]
    yield h
    dl._BaseDataLoaderIter.__init__, dl._BaseDataLoaderIter.__next__, dl.DataLoader._get_iterator = saved


def _epochs(loader: DataLoader, n: int) -> None:
    for _ in range(n):
        for _ in loader:
            pass


def test_each_epoch_s_iterator_is_counted_and_timed(hooks):
    loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    _epochs(loader, 3)
    [(loader_id, stats)] = hooks.loader_stats.items()
    assert stats[0] == 6 and stats[3] == 3 and stats[4] > 0.0
    hooks.periodic()
    [sent] = [f for k, f in hooks.events if k == "loader_stats"]
    assert sent["stats"][loader_id][3] == 3 and sent["stats"][loader_id][4] == pytest.approx(stats[4], abs=1e-6)


@pytest.mark.integration
def test_workers_are_started_each_epoch_unless_persistent(hooks):
    data = TensorDataset(torch.zeros(8, 2))
    fresh = DataLoader(data, batch_size=4, num_workers=2)
    kept = DataLoader(data, batch_size=4, num_workers=2, persistent_workers=True)
    _epochs(fresh, 3)
    _epochs(kept, 3)
    fresh_stats, kept_stats = hooks.loader_stats.values()  # in the order the loaders were first iterated
    assert fresh_stats[3] == 3 and kept_stats[3] == 1  # one iterator, its workers kept across epochs
    assert fresh_stats[4] > kept_stats[4]  # 6 workers started against 2


def test_a_worker_does_not_take_the_lock_its_parent_held_at_fork(hooks):
    """A fork while the parent's flusher held loader_lock leaves the child's copy locked for good: the
    worker's first fetch makes its own lock instead of waiting on that one."""
    import threading

    hooks.agent.writer = SimpleNamespace(ensure_running=lambda: None, flush=lambda force=False: None)
    hooks._unhook = lambda: None  # the fixture's patches are put back by the fixture
    inherited = hooks.loader_lock
    inherited.acquire()  # as the fork found it
    entered = threading.Event()

    def first_fetch() -> None:
        hooks._enter_worker()
        hooks._on_batch("w", 0.001)  # takes the lock again
        entered.set()

    thread = threading.Thread(target=first_fetch, daemon=True)
    thread.start()
    thread.join(timeout=10)
    inherited.release()
    assert entered.is_set() and hooks.loader_lock is not inherited
    assert hooks.loader_stats == {"w": [1, 0.001, 0.001, 0, 0.0]}
