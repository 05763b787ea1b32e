"""A fetch's CPU and run-queue time are read on a sample of the batches; every batch's wall time counts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as dl
from torch.utils.data._utils import fetch as fetch_mod

from gpudoctor.agent import torch_hooks
from gpudoctor.agent.stats import FetchStats
from gpudoctor.agent.torch_hooks import TorchHooks


def test_the_read_batches_stand_for_the_others_by_wall_time():
    stats = FetchStats()
    # known answer: 10 batches of 2 ms wall, the loop's thread on the CPU half of it and queued a
    # quarter; two of them read, one 1 ms fetch not read
    for i in range(10):
        read = i in (0, 5)
        stats.add("L", 0.002, 0.001 if read else None, 0.0005 if read else None)
    stats.add("L", 0.001, None, None)
    [(key, (batches, wall, cpu, runqueue))] = (stats.snapshot() or {}).items()
    assert key == "L" and batches == 11
    assert wall == pytest.approx(0.021)
    assert cpu == pytest.approx(0.0105)  # half of all the wall time, not just of the two read
    assert runqueue == pytest.approx(0.00525)
    assert stats.snapshot() is None  # nothing new since


def test_a_run_queue_missing_from_a_read_batch_leaves_it_unknown():
    stats = FetchStats()
    stats.add("L", 0.002, 0.001, 0.0005)
    stats.add("L", 0.002, 0.001, None)  # a thread whose schedstat could not be read
    stats.add("L", 0.002, None, None)  # not read: says nothing of the run queue
    [(batches, wall, cpu, runqueue)] = (stats.snapshot() or {}).values()
    assert (batches, runqueue) == (3, None) and wall == pytest.approx(0.006) and cpu == pytest.approx(0.003)


@pytest.fixture
def hooks(monkeypatch):
    """TorchHooks with the DataLoader and its fetchers patched, torch's originals restored afterwards."""
    saved = (dl._BaseDataLoaderIter.__init__, dl._BaseDataLoaderIter.__next__, dl.DataLoader._get_iterator,
             fetch_mod._MapDatasetFetcher.fetch, fetch_mod._IterableDatasetFetcher.fetch)
    agent = SimpleNamespace(config={}, emit=lambda kind, **f: None, emit_steps=lambda steps: None,
                            error=lambda where, exc: None)
    h = TorchHooks(agent, torch)  # type: ignore[arg-type]
    h._patch_dataloader()
    h._patch_fetchers()
    yield h
    (dl._BaseDataLoaderIter.__init__, dl._BaseDataLoaderIter.__next__, dl.DataLoader._get_iterator,
     fetch_mod._MapDatasetFetcher.fetch, fetch_mod._IterableDatasetFetcher.fetch) = saved


class _Timed(torch.utils.data.Dataset):
    """Each item takes 1 ms of a stepped clock, the thread on the CPU half of it."""

    def __init__(self, clock: list[float], n: int) -> None:
        self.clock, self.n = clock, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.clock[0] += 0.001
        return i


def _stepped(monkeypatch) -> tuple[list[float], list[float]]:
    clock = [0.0]
    reads: list[float] = []

    def cpu() -> float:
        reads.append(clock[0])
        return clock[0] / 2

    monkeypatch.setattr(torch_hooks, "_perf", lambda: clock[0])
    monkeypatch.setattr(torch_hooks, "_cpu", cpu)
    return clock, reads


def test_fast_batches_read_the_cpu_clock_once_a_sampling_interval_not_per_batch(hooks, monkeypatch):
    """The guard: a `num_workers=0` loader's fetch reads the thread's CPU clock (a system call) on one
    batch each SAMPLE_EVERY_S, not around every batch (800 reads here)."""
    clock, reads = _stepped(monkeypatch)
    for _ in DataLoader(_Timed(clock, 400), batch_size=1):
        pass
    # 400 batches of 1 ms: the batch that starts each 20 ms is read, two calls each
    assert len(reads) // 2 == pytest.approx(0.4 / FetchStats.SAMPLE_EVERY_S, abs=1)
    [(batches, wall, cpu_s, _)] = (hooks.fetch.snapshot() or {}).values()
    assert batches == 400 and wall == pytest.approx(0.4)
    assert cpu_s == pytest.approx(0.2)  # half of every batch's wall time, from the 20 read


def test_a_batch_slower_than_the_interval_is_always_read(hooks, monkeypatch):
    clock, reads = _stepped(monkeypatch)
    for _ in DataLoader(_Timed(clock, 150), batch_size=50):  # 50 ms batches
        pass
    assert len(reads) == 6


def test_a_second_loader_on_the_same_thread_is_read_from_its_first_batch(hooks, monkeypatch):
    clock, _ = _stepped(monkeypatch)
    for n in (4, 2):  # a training loader, then an evaluation one within 20 ms of its last read
        for _ in DataLoader(_Timed(clock, n), batch_size=1):
            pass
    entries = list(hooks.fetch.by_key.values())
    assert len(entries) == 2 and all(entry[5] >= 1 for entry in entries)
    assert [e[0] for e in (hooks.fetch.snapshot() or {}).values()] == [4, 2]
