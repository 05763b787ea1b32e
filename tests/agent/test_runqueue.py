"""The fetch timer's run-queue clock: this thread's, read in place, right after a fork too."""

from __future__ import annotations

import os
import threading

import pytest

from gpudoctor.agent import stats

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="Linux schedstat only")


def _schedstat_now() -> float:
    with open("/proc/thread-self/schedstat", "rb") as fh:
        return int(fh.read().split()[1]) / 1e9


def test_the_clock_is_this_threads_and_moves_with_it() -> None:
    first = stats.runqueue_s()
    assert first is not None and abs(first - _schedstat_now()) < 0.05
    assert stats.runqueue_s() >= first  # read in place, not a stale first read
    seen: dict[str, float | None] = {}

    def other() -> None:  # a thread of its own gets its own file, not the main thread's
        seen["mine"] = stats.runqueue_s()
        seen["true"] = _schedstat_now()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen["mine"] is not None and abs(seen["mine"] - seen["true"]) < 0.05


@pytest.mark.integration
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_reads_its_own_thread_not_the_parents() -> None:
    stats.runqueue_s()  # the parent's file is open
    parent_fd = stats._schedstat.stat.fd
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its clock is its own thread's, through a file opened anew
        try:
            os.close(read)
            mine = stats.runqueue_s()
            ok = mine is not None and abs(mine - _schedstat_now()) < 0.05 and stats._schedstat.stat.pid == os.getpid()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"1"
    assert stats._schedstat.stat.fd == parent_fd and stats.runqueue_s() is not None


def test_no_schedstat_gives_none_and_stops_asking(monkeypatch) -> None:
    monkeypatch.setattr(stats, "_SCHEDSTAT_MISSING", [])
    monkeypatch.setattr(stats, "_schedstat", threading.local())

    tries: list[str] = []

    def missing(path, *args, **kwargs):
        tries.append(path)
        raise FileNotFoundError("no /proc")

    monkeypatch.setattr(stats.os, "open", missing)
    assert stats.runqueue_s() is None and stats._SCHEDSTAT_MISSING == [True]
    assert stats.runqueue_s() is None and len(tries) == 1  # asked once, not on every fetch
