"""Where batch production spends its time: cProfile's statistics into the fetch_profile event."""

from __future__ import annotations

import cProfile
import os
import threading

import torch
from agent_fakes import FakeHooks

from gpudoctor.agent.fetch_profile import FetchProfiler, short_path, top_functions


class Normalize:
    def __call__(self, x):
        for _ in range(30):
            x = torch.nn.functional.conv1d(x, torch.ones(1, 1, 3), padding=1)  # a builtin: its own time
        return x


class Cheap:
    def __call__(self, x):
        return x + 1


def get_item(x):
    return Cheap()(Normalize()(x))


def test_the_costliest_function_owns_the_builtins_it_calls(tmp_path):
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        get_item(torch.ones(1, 1, 4096))
    prof.disable()
    rows = top_functions(prof.getstats(), os.getcwd())
    name, file, _line, own, cumulative, calls, caller = rows[0]
    assert name in ("Normalize.__call__", "__call__") and file == "tests/agent/test_fetch_profile.py"
    assert calls == 5 and own > 0.5 * cumulative and caller.startswith(("get_item (", "get_item"))
    assert all(r[3] >= rows[i + 1][3] for i, r in enumerate(rows[:-1]))


def test_paths_as_a_reader_knows_them():
    assert short_path("/venv/lib/python3.11/site-packages/torchvision/transforms/transforms.py", "/w") \
        == "torchvision/transforms/transforms.py"
    assert short_path("/w/data/aug.py", "/w") == "data/aug.py"
    assert short_path("/usr/lib/python3.11/json/decoder.py", "/w") == "json/decoder.py"


def test_one_process_claims_the_request_and_profiles_a_few_batches(tmp_path):
    hooks = FakeHooks(tmp_path, fetch_profile_batches=3)
    hooks.loader_lock = threading.Lock()
    hooks.loader_stats = {}
    hooks.agent.writer = type("W", (), {"flush": lambda self: None})()
    profiler = FetchProfiler(hooks)
    other = FetchProfiler(hooks)  # a second worker of the same run
    assert profiler.begin() is False  # nothing requested
    hooks.loader_stats = {"1:0": [5, 0.5, 0.1]}
    profiler.poll()
    hooks.loader_stats = {"1:0": [50, 5.0, 0.1]}
    profiler.seen["1:0"] = (5, 0.5, profiler.seen["1:0"][2] - 2.0)  # two seconds ago
    profiler.poll()
    assert (tmp_path / "fetch-profile.request").read_text() == "1:0"
    profiler.next_check = 0.0  # it looks for the request at most every 0.5 s
    for _ in range(3):
        assert profiler.begin() is True
        get_item(torch.ones(1, 1, 256))
        profiler.end(0.01)
    other.next_check = 0.0
    assert other.begin() is False and other.state == other.DONE  # claimed already
    (event,) = hooks.kind("fetch_profile")
    assert event["batches"] == 3 and event["wall_s"] == 0.03 and event["functions"]
    assert profiler.begin() is False  # done for good


def _requested(tmp_path, batches: int) -> FetchProfiler:
    hooks = FakeHooks(tmp_path, fetch_profile_batches=batches)
    hooks.loader_lock = threading.Lock()
    hooks.agent.writer = type("W", (), {"flush": lambda self: None})()
    (tmp_path / "fetch-profile.request").write_text("1:0")
    return FetchProfiler(hooks)


def test_the_event_says_when_the_profiled_fetches_ran(tmp_path):
    import time

    profiler = _requested(tmp_path, 2)
    before = time.time()
    for _ in range(2):
        assert profiler.begin() is True
        get_item(torch.ones(1, 1, 256))
        profiler.end(0.01)
    (event,) = profiler.hooks.kind("fetch_profile")
    assert before <= event["t_start"] <= event["t_end"] <= time.time() and event["complete"] is True


def test_a_profile_cut_short_by_the_process_end_emits_what_it_has(tmp_path):
    profiler = _requested(tmp_path, 8)
    assert profiler.begin() is True
    get_item(torch.ones(1, 1, 256))
    profiler.end(0.02)
    assert profiler.hooks.kind("fetch_profile") == []
    profiler.finish()
    (event,) = profiler.hooks.kind("fetch_profile")
    assert event["batches"] == 1 and event["complete"] is False and event["t_start"] <= event["t_end"]
    profiler.finish()  # once only
    assert len(profiler.hooks.kind("fetch_profile")) == 1 and profiler.begin() is False


def test_a_process_that_never_profiled_emits_nothing_at_its_end(tmp_path):
    profiler = _requested(tmp_path, 8)
    profiler.finish()
    assert profiler.hooks.kind("fetch_profile") == []


def test_an_idle_profiler_asks_nothing_of_the_kernel_before_its_next_look(tmp_path, monkeypatch):
    """begin() runs before every batch: between its looks for a request (every CHECK_EVERY_S) it makes
    no system call (a getpid a batch cost a `num_workers=0` loop on a VM several us a step)."""
    from gpudoctor.agent import fetch_profile

    profiler = FetchProfiler(FakeHooks(tmp_path))
    assert profiler.begin() is False  # looked: nothing requested; the next look is CHECK_EVERY_S away
    calls: list[int] = []
    real_getpid = os.getpid
    monkeypatch.setattr(fetch_profile.os, "getpid", lambda: calls.append(1) or real_getpid())
    assert [profiler.begin() for _ in range(100)] == [False] * 100
    assert calls == []
    profiler.next_check = 0.0  # time for the next look: a forked child must still find it is not the parent
    assert profiler.begin() is False and calls == [1]
