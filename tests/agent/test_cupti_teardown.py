"""TEARDOWN_CUPTI is set for each profiler window's life, and only where the user left it unset.

Kineto keeps CUPTI's callbacks on every CUDA launch after a window unless the variable is
"1" (benchmarks/overhead.py measured a launch-bound loop 25% slower outside the windows
without it on an H200, within 1% with it).
"""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import pytest
import torch
from agent_fakes import FakeHooks

from gpudoctor.agent.profiler import (
    CUPTI_TEARDOWN_MIN_S,
    CUPTI_TEARDOWN_STEPS,
    CUPTI_TEARDOWN_WAIT_S,
    _cupti_teardown,
    await_detach,
    thread_ids,
)


def fake_torch(cuda):
    return SimpleNamespace(version=SimpleNamespace(cuda=cuda))


def waiting_guard() -> _cupti_teardown:
    """A CUDA 13 torch's guard whose window has just stopped after tracing CUDA: the detach is pending."""
    guard = _cupti_teardown(fake_torch("13.0"))
    guard.__enter__()
    guard.later(cuda=True)
    return guard


@pytest.fixture(autouse=True)
def no_variable(monkeypatch):
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    yield
    os.environ.pop("TEARDOWN_CUPTI", None)  # what a guard kept (the process's, by design) ends with the test


def test_set_for_the_window_and_removed_after():
    guard = _cupti_teardown(fake_torch("13.0"))
    with guard:
        assert os.environ["TEARDOWN_CUPTI"] == "1"
    assert "TEARDOWN_CUPTI" not in os.environ


def test_the_users_own_value_is_kept(monkeypatch):
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    with _cupti_teardown(fake_torch("12.8")):
        assert os.environ["TEARDOWN_CUPTI"] == "0"
    assert os.environ["TEARDOWN_CUPTI"] == "0"


def test_a_value_set_by_torch_during_the_window_stays():
    """torch.compile with CUDA graphs sets "0" itself: that choice outlives the window."""
    with _cupti_teardown(fake_torch("12.4")):
        os.environ["TEARDOWN_CUPTI"] = "0"
    assert os.environ["TEARDOWN_CUPTI"] == "0"


@pytest.mark.parametrize("cuda", [None, "11.8", "garbage"])
def test_never_set_without_cuda_12(cuda):
    with _cupti_teardown(fake_torch(cuda)):
        assert "TEARDOWN_CUPTI" not in os.environ


def test_leaving_twice_is_harmless():
    guard = _cupti_teardown(fake_torch("13.0"))
    guard.__enter__()
    guard.__exit__(None, None, None)
    os.environ["TEARDOWN_CUPTI"] = "1"  # the user's own, set after the window
    guard.__exit__(None, None, None)
    assert os.environ["TEARDOWN_CUPTI"] == "1"


# Kineto finishes the detach later, on a thread of its own that waits for the next CUDA call and
# then reads the variable again: unset by then, it re-attaches CUPTI's callbacks for the rest of
# the run. How long that takes is not known, so after a window that traced CUDA the variable stays
# for the rest of the watch; the next window only waits for the detach (pending).

def test_after_a_window_that_traced_cuda_the_variable_stays_for_the_rest_of_the_watch():
    guard = waiting_guard()
    assert os.environ["TEARDOWN_CUPTI"] == "1" and guard.pending()
    guard.detach_due()  # too soon
    assert os.environ["TEARDOWN_CUPTI"] == "1" and guard.pending()
    guard.wait_until = time.monotonic() - 0.001  # the wait is over: a window may start ...
    guard.detach_due()
    assert not guard.pending()
    assert os.environ["TEARDOWN_CUPTI"] == "1"  # ... and the variable stays, whatever the detach's pace


def test_a_later_window_keeps_the_variable_ours_and_so_does_the_end_of_the_watch():
    guard = waiting_guard()
    guard.wait_until = time.monotonic() - 0.001
    guard.detach_due()
    guard.__enter__()  # the next window: set since the last one, still ours
    assert guard.set and os.environ["TEARDOWN_CUPTI"] == "1"
    guard.later(cuda=False)  # even a window without CUDA leaves the earlier detach its variable
    guard.__exit__(None, None, None)  # (a window that failed to start, or was abandoned: the same)
    assert os.environ["TEARDOWN_CUPTI"] == "1"
    guard.watch_ended()  # the detach may wait for a CUDA call yet: unset, CUPTI would re-attach
    assert os.environ["TEARDOWN_CUPTI"] == "1" and guard.set
    guard.__enter__()  # a second in-process watch's window: still ours, not taken for the user's
    assert guard.set


def test_a_watch_whose_windows_traced_no_cuda_gives_the_variable_back_at_its_end():
    guard = _cupti_teardown(fake_torch("13.0"))
    guard.__enter__()
    guard.watch_ended()
    assert "TEARDOWN_CUPTI" not in os.environ and not guard.set


def test_torchs_own_value_written_after_ours_is_kept_and_never_taken_for_ours():
    """torch.compile with CUDA graphs writes "0" while ours is kept: torch's, from then on."""
    guard = waiting_guard()
    os.environ["TEARDOWN_CUPTI"] = "0"
    guard.wait_until = time.monotonic() - 0.001
    guard.detach_due()
    guard.__enter__()
    assert not guard.set and os.environ["TEARDOWN_CUPTI"] == "0"
    guard.__exit__(None, None, None)
    guard.watch_ended()
    assert os.environ["TEARDOWN_CUPTI"] == "0"


def test_a_window_without_cuda_restores_at_once():
    guard = _cupti_teardown(fake_torch("13.0"))
    guard.__enter__()
    guard.later(cuda=False)
    assert "TEARDOWN_CUPTI" not in os.environ and not guard.pending()


def test_the_users_own_teardown_still_makes_the_next_window_wait_and_is_kept(monkeypatch):
    monkeypatch.setenv("TEARDOWN_CUPTI", "1")
    guard = waiting_guard()
    assert guard.pending()  # the detach runs as well: a window started now could lose its GPU events
    guard.wait_until = time.monotonic() - 0.001
    guard.detach_due()
    assert os.environ["TEARDOWN_CUPTI"] == "1" and not guard.pending()
    guard.watch_ended()  # not ours: nothing to give back
    assert os.environ["TEARDOWN_CUPTI"] == "1"


def test_no_window_starts_while_the_last_ones_detach_may_be_under_way(tmp_path):
    hooks = FakeHooks(tmp_path, cuda=True, profile_warmup_steps=2, profile_warmup_s=0.0, profile_steps=2,
                      profile_min_window_s=0.0)
    profiler = hooks.profiler
    profiler.teardown = _cupti_teardown(fake_torch("13.0"))  # a CUDA 13 torch's guard, on this CPU build

    def steps(n):
        for _ in range(n):
            hooks.steps.boundary("optimizer")

    steps(3)
    assert profiler.state == "running"
    profiler.window.cuda = True  # as if it traced CUDA (this build cannot)
    steps(2)
    assert [w["why"] for w in hooks.windows()] == ["steps"] and profiler.state == "idle"
    assert os.environ["TEARDOWN_CUPTI"] == "1" and profiler.teardown.pending()
    hooks.tls.last_loader = "eval"  # a new phase, due a window of its own ...
    steps(5)
    assert profiler.state == "idle"  # ... which waits
    profiler.teardown.wait_until = time.monotonic() - 0.001
    steps(1)  # the next step ends the wait, and the phase's window opens (the variable still ours)
    assert not profiler.teardown.pending()
    assert profiler.state == "running" and profiler.window.label == "phase"
    profiler.stop("test end")  # a CPU-only window: nothing to wait for, the first one's variable stays
    assert os.environ["TEARDOWN_CUPTI"] == "1" and not profiler.teardown.pending()
    profiler.finish()  # the watch ends: a CUDA window's detach may still read the variable
    assert os.environ["TEARDOWN_CUPTI"] == "1"


def test_a_child_forked_when_the_variable_is_the_users_keeps_it(monkeypatch):
    monkeypatch.setenv("TEARDOWN_CUPTI", "1")
    guard = waiting_guard()
    guard.forked()
    assert os.environ["TEARDOWN_CUPTI"] == "1" and not guard.pending()


def test_a_second_watch_in_the_process_waits_for_the_first_ones_detach(tmp_path):
    """Each in-process watch makes its own ProfilerWindow; the variable and its wait are the process's."""
    first, second = FakeHooks(tmp_path, cuda=True), FakeHooks(tmp_path, cuda=True)
    assert first.profiler.teardown is second.profiler.teardown
    guard = first.profiler.teardown
    saved = guard.torch
    guard.torch = fake_torch("13.0")
    try:
        guard.__enter__()
        guard.later(cuda=True)  # the first watch's window stopped
        assert second.profiler._due(("optimizer", None, True, True)) is None  # the second one's waits
        guard.wait_until = time.monotonic() - 0.001
        guard.detach_due()
        assert second.profiler._due(("optimizer", None, True, True)) == "start"
    finally:
        guard.torch = saved
        with guard.lock:
            guard._restore()  # the process-wide guard back to its first state for the tests after this one


def test_a_child_forked_while_the_detach_is_pending_gives_the_variable_back(tmp_path):
    guard = waiting_guard()
    with guard.lock:  # held by another thread at the fork: the child must not wait on it
        guard.forked()
    assert "TEARDOWN_CUPTI" not in os.environ and not guard.pending()


# The wait ends with the stepping thread's steps (each a run of CUDA calls: the finalize happens at
# the first one after Kineto's flush) once CUPTI_TEARDOWN_MIN_S has passed, or after
# CUPTI_TEARDOWN_WAIT_S without them. A fixed 2 s left a short run without its window.

def test_steps_on_cuda_end_the_wait_once_the_flush_had_its_time():
    guard = waiting_guard()
    for _ in range(CUPTI_TEARDOWN_STEPS + 2):
        guard.detach_due(stepped=True)  # within CUPTI_TEARDOWN_MIN_S of the stop: the flush may run yet
    assert guard.pending()
    guard.stepped_until = time.monotonic() - 0.001  # that time has passed
    guard.detach_due()  # the next call (a poll here): the steps were counted already
    assert not guard.pending() and os.environ["TEARDOWN_CUPTI"] == "1"


def test_too_few_steps_wait_for_the_full_time():
    guard = waiting_guard()
    guard.stepped_until = time.monotonic() - 0.001
    for _ in range(CUPTI_TEARDOWN_STEPS - 1):
        guard.detach_due(stepped=True)
    guard.detach_due()  # a poll, not a step
    assert guard.pending() and os.environ["TEARDOWN_CUPTI"] == "1"
    guard.detach_due(stepped=True)
    assert not guard.pending()


def test_a_time_window_superseded_by_the_first_step_leaves_the_step_window_its_place(tmp_path):
    """The run's first step discards the time window opened while it started: the step window
    opens a few steps after the detach, not 2 s later (a short run would have none)."""
    hooks = FakeHooks(tmp_path, cuda=True, profile_warmup_steps=2, profile_warmup_s=0.0, profile_steps=2,
                      profile_min_window_s=0.0, profile_no_step_after_s=0.0, profile_time_window_s=60.0)
    profiler = hooks.profiler
    profiler.teardown = _cupti_teardown(fake_torch("13.0"))
    profiler.poll()  # quiet since CUDA started: a time window is due
    x = torch.ones(2)
    deadline = time.monotonic() + 5
    while profiler.state != "running" and time.monotonic() < deadline:
        x = x.to(torch.float64)  # a safe point opens it
    assert profiler.state == "running" and profiler.window.source == "time"
    profiler.window.cuda = True  # as if it traced CUDA (this build cannot)
    hooks.steps.boundary("optimizer")  # the first step: the time window is discarded
    assert profiler.state == "idle" and profiler.teardown.pending() and not hooks.windows()
    time.sleep(CUPTI_TEARDOWN_MIN_S + 0.05)
    started = time.monotonic()
    while profiler.state != "running" and time.monotonic() - started < 1.0:
        hooks.steps.boundary("optimizer")
    assert profiler.state == "running" and profiler.window.source == "optimizer"
    assert time.monotonic() - started < CUPTI_TEARDOWN_WAIT_S
    profiler.stop("test end")


def test_steps_without_cuda_do_not_end_the_wait(tmp_path):
    """A step that made no CUDA call cannot have let Kineto finalize."""
    hooks = FakeHooks(tmp_path, cuda=False)
    guard = hooks.profiler.teardown = _cupti_teardown(fake_torch("13.0"))
    guard.__enter__()
    guard.later(cuda=True)
    guard.stepped_until = time.monotonic() - 0.001
    for _ in range(CUPTI_TEARDOWN_STEPS + 2):
        hooks.steps.boundary("optimizer")
    assert guard.pending()
    guard.__exit__(None, None, None)


# Kineto's detach thread starts inside the window's stop and ends once a CUDA runtime call has let
# it finalize: the stop makes those calls itself until the thread is seen to end, so the finalize
# runs on the window's thread before the workload goes on (a fork of new workers, the next launches).

def kineto_like_detach() -> tuple[threading.Event, threading.Thread]:
    """A thread like Kineto's teardown thread: it ends once a "runtime call" (the event) has come."""
    called = threading.Event()
    thread = threading.Thread(target=called.wait, args=(5.0,), daemon=True)
    thread.start()
    return called, thread


def test_the_stop_waits_for_the_detach_thread_it_started_making_runtime_calls_until_it_ends():
    before = thread_ids()
    pokes: list[int] = []
    called, thread = kineto_like_detach()

    def poke():
        pokes.append(1)
        called.set()

    how, ms = await_detach(before, poke)
    assert how == "ended" and pokes and ms < 1000
    thread.join(1.0)


def test_no_thread_started_by_the_stop_is_no_detach_to_wait_for():
    before = thread_ids()
    pokes: list[int] = []
    assert await_detach(before, lambda: pokes.append(1)) == ("no thread", 0.0)
    assert not pokes  # nothing called: the guard's own wait stands


def test_a_thread_that_does_not_end_is_given_up_at_the_timeout():
    before = thread_ids()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(5.0,), daemon=True)
    thread.start()
    began = time.monotonic()
    how, _ = await_detach(before, lambda: None, timeout=0.05)
    assert how == "timeout" and time.monotonic() - began < 1.0
    stop.set()
    thread.join(1.0)


def test_a_runtime_call_that_fails_ends_the_wait_at_once():
    before = thread_ids()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(5.0,), daemon=True)
    thread.start()

    def capturing():
        raise RuntimeError("a CUDA graph is being captured")

    assert await_detach(before, capturing)[0] == "timeout"
    stop.set()
    thread.join(1.0)


def test_a_detach_seen_to_end_gives_the_variable_back_and_the_next_window_need_not_wait():
    guard = _cupti_teardown(fake_torch("13.0"))
    guard.__enter__()
    guard.later(cuda=True, detached=True)
    assert "TEARDOWN_CUPTI" not in os.environ and not guard.pending() and not guard.traced_cuda


def test_an_earlier_detach_not_seen_to_end_keeps_the_variable_whatever_the_later_one_did():
    guard = waiting_guard()  # a window whose detach was not seen to end
    guard.wait_until = time.monotonic() - 0.001
    guard.detach_due()
    guard.__enter__()
    guard.later(cuda=True, detached=True)
    assert os.environ["TEARDOWN_CUPTI"] == "1" and guard.traced_cuda


def test_a_windows_stop_finalizes_the_detach_on_its_own_thread_and_says_so(tmp_path):
    hooks = FakeHooks(tmp_path, cuda=True, profile_warmup_steps=2, profile_warmup_s=0.0, profile_steps=2,
                      profile_min_window_s=0.0)
    profiler = hooks.profiler
    profiler.teardown = _cupti_teardown(fake_torch("13.0"))
    for _ in range(3):
        hooks.steps.boundary("optimizer")
    assert profiler.state == "running"
    profiler.window.cuda = True  # as if it traced CUDA (this build cannot)
    stop = profiler.prof.stop
    pokes: list[int] = []
    started: list[threading.Event] = []

    def stop_like_kineto():  # torch's stop, then Kineto's detach thread waiting for a runtime call
        stop()
        called, _ = kineto_like_detach()
        started.append(called)

    def runtime_call():
        pokes.append(threading.get_ident())
        started[0].set()

    profiler.prof.stop = stop_like_kineto
    profiler._cuda_poke = runtime_call
    for _ in range(2):
        hooks.steps.boundary("optimizer")
    [window] = hooks.windows()
    assert window["cupti_detach"] == "ended" and window["cupti_detach_ms"] >= 0
    assert set(pokes) == {threading.get_ident()}  # on the window's thread
    assert "TEARDOWN_CUPTI" not in os.environ and not profiler.teardown.pending()


def test_a_short_lived_thread_of_the_stop_does_not_pass_for_the_detach_while_another_runs():
    before = thread_ids()
    quick = threading.Thread(target=time.sleep, args=(0.02,), daemon=True)  # ends during the wait
    stop = threading.Event()
    slow = threading.Thread(target=stop.wait, args=(5.0,), daemon=True)  # does not
    quick.start()
    slow.start()
    assert await_detach(before, lambda: None, timeout=0.3)[0] == "timeout"
    assert not quick.is_alive()
    stop.set()
    slow.join(1.0)
