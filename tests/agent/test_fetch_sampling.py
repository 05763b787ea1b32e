"""A fetch's CPU and run-queue time are read on a sample of the batches; every batch's wall time counts."""

from __future__ import annotations

import random
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


def test_fast_batches_read_the_cpu_clock_about_once_a_sampling_interval_not_per_batch(hooks, monkeypatch):
    """The guard: a `num_workers=0` loader's fetch reads the thread's CPU clock (a system call) on about
    one batch each SAMPLE_EVERY_S, not around every batch (800 reads here)."""
    clock, reads = _stepped(monkeypatch)
    hooks.fetch.random = random.Random(0)
    for _ in DataLoader(_Timed(clock, 2000), batch_size=1):
        pass
    # 2,000 batches of 1 ms: each read with p = 1/10 after the first two, two calls a read
    assert 150 <= len(reads) // 2 <= 250  # 200 expected (sd 13): far from 800, or 2,000 read calls
    [(batches, wall, cpu_s, _)] = (hooks.fetch.snapshot() or {}).values()
    assert batches == 2000 and wall == pytest.approx(2.0)
    assert cpu_s == pytest.approx(1.0)  # half of every batch's wall time, from the few read


class _Periodic(torch.utils.data.Dataset):
    """Every tenth batch waits 30 ms for storage (no CPU); the others compute for 2 ms."""

    def __init__(self, clock: list[float], cpu: list[float], n: int) -> None:
        self.clock, self.cpu, self.n = clock, cpu, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.clock[0] += 0.030 if i % 10 == 9 else 0.002
        self.cpu[0] += 0.0 if i % 10 == 9 else 0.002
        return i


def test_a_periodic_loader_is_not_read_in_step_with_its_period(hooks, monkeypatch):
    """A read 20 ms after the last one locked onto the period (reviewed: a slow batch every tenth one
    was never read, 0.96 estimated for 0.375); random skips read each batch alike."""
    clock, cpu = [0.0], [0.0]
    monkeypatch.setattr(torch_hooks, "_perf", lambda: clock[0])
    monkeypatch.setattr(torch_hooks, "_cpu", lambda: cpu[0])
    hooks.fetch.random = random.Random(1)
    for _ in DataLoader(_Periodic(clock, cpu, 20000), batch_size=1):
        pass
    [(batches, wall, cpu_s, _)] = (hooks.fetch.snapshot() or {}).values()
    assert batches == 20000 and wall == pytest.approx(96.0)
    assert cpu_s / wall == pytest.approx(36.0 / 96.0, abs=0.06)  # 0.375


def test_reading_does_not_touch_the_workloads_random_state(hooks, monkeypatch):
    clock, _ = _stepped(monkeypatch)
    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    for _ in DataLoader(_Timed(clock, 300), batch_size=1):
        pass
    assert [random.random() for _ in range(3)] == expected


def test_a_batch_slower_than_the_interval_is_always_read(hooks, monkeypatch):
    clock, reads = _stepped(monkeypatch)
    for _ in DataLoader(_Timed(clock, 150), batch_size=50):  # 50 ms batches
        pass
    assert len(reads) == 6


def test_a_second_loader_on_the_same_thread_is_read_from_its_first_batch(hooks, monkeypatch):
    clock, _ = _stepped(monkeypatch)
    for n in (4, 2):  # a training loader, then an evaluation one within 10 ms of its last read
        for _ in DataLoader(_Timed(clock, n), batch_size=1):
            pass
    entries = list(hooks.fetch.by_key.values())
    assert len(entries) == 2 and all(entry[5] >= 1 for entry in entries)
    assert [e[0] for e in (hooks.fetch.snapshot() or {}).values()] == [4, 2]


def test_a_forked_childs_first_batch_is_read_whatever_its_parents_plan():
    """A worker forked mid-epoch inherits the parent's countdown; its own numbers must start with a read
    (an entry without one would say the batches cost no CPU)."""
    from gpudoctor.agent import stats as stats_module

    fetch = FetchStats()
    assert fetch.reading(None) is True
    fetch.plans[None] = [50, 0.02, 1.0, 50]  # the parent: 49 more batches before its next read
    assert fetch.reading(None) is False
    stats_module._after_fork_in_child()  # what os.register_at_fork runs in the child
    assert fetch.reading(None) is True
