"""No process is forked inside a profiler window (issue 24): what a fork does to a window, on CPU.

A child forked while torch.profiler runs keeps the profiler on for its whole life (a
DataLoader worker then makes batches 2-3x slower). These tests fork for real and ask
the child what it inherited.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest
import torch
from agent_fakes import FakeHooks

pytestmark = pytest.mark.integration  # os.fork


@pytest.fixture
def hooks(tmp_path):
    made = FakeHooks(tmp_path, cuda=False, profile_warmup_steps=2, profile_warmup_s=0.0, profile_steps=1000,
                     profile_min_window_s=0.0)
    yield made
    if made.profiler.state == made.profiler.RUNNING:
        made.profiler.stop("test end")


def child_state() -> dict:
    """Fork; the child reports whether torch's profiler and a Python tracer are on in it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's exit handlers
        try:
            os.close(read)
            os.write(write, json.dumps({"profiler": bool(torch.autograd._profiler_enabled()),
                                        "tracer": sys.getprofile() is not None}).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        answer = json.loads(fh.read())
    os.waitpid(pid, 0)
    return answer


def steps(hooks, n):
    for _ in range(n):
        hooks.steps.boundary("optimizer")


def test_a_fork_inside_a_window_closes_it_first_and_keeps_what_it_saw(hooks, tmp_path):
    steps(hooks, 3)
    assert hooks.profiler.state == "running" and torch.autograd._profiler_enabled()
    steps(hooks, 2)
    assert child_state() == {"profiler": False, "tracer": False}
    (window,) = hooks.windows()
    assert window["why"] == "fork" and window["steps"] == 2 and (tmp_path / window["path"]).is_file()
    assert hooks.profiler.state == "idle" and not torch.autograd._profiler_enabled()


def test_a_fork_before_the_window_saw_a_step_discards_it_to_be_taken_again(hooks):
    steps(hooks, 3)
    assert hooks.profiler.state == "running"
    assert child_state() == {"profiler": False, "tracer": False}
    assert hooks.windows() == [] and hooks.profiler.taken == 0 and hooks.profiler.state == "idle"
    steps(hooks, 3)  # the phase goes on: its window opens again
    assert hooks.profiler.state == "running"


@pytest.fixture
def timed(tmp_path):
    """A run due a time-bounded window at once (CUDA in use, no step yet), with the default minimum window."""
    made = FakeHooks(tmp_path, profile_warmup_steps=2, profile_warmup_s=0.0, profile_steps=3, profile_min_window_s=0.3,
                     profile_no_step_after_s=0.0, profile_time_window_s=60.0, profile_time_max_calls=10**9)
    yield made
    made.safepoints.disarm()
    if made.profiler.state == made.profiler.RUNNING:
        made.profiler.stop("test end")


def open_time_window(hooks):
    hooks.profiler.poll()  # the agent's thread arms the safe points
    torch.ones(2).to(torch.float64)  # the main thread's next hooked call opens the window
    assert hooks.profiler.state == "running" and hooks.profiler.window.source == "time"


def test_a_fork_right_after_a_time_window_opened_discards_it_for_the_loops_steps(timed):
    """A DataLoader starting its workers just after the set-up went quiet: the loop's steps come next."""
    open_time_window(timed)
    assert child_state() == {"profiler": False, "tracer": False}
    assert timed.windows() == [] and timed.profiler.taken == 0 and timed.profiler.state == "idle"
    assert not timed.safepoints.armed
    steps(timed, 3)
    assert timed.profiler.state == "running" and timed.profiler.window.label == "start"
    assert timed.profiler.window.source == "optimizer"


def test_a_stepless_run_that_forks_often_keeps_its_second_time_window(timed):
    open_time_window(timed)
    child_state()  # discarded: the first one only
    open_time_window(timed)
    child_state()
    (window,) = timed.windows()
    assert window["source"] == "time" and window["why"] == "fork" and window["label"] == "start"
    assert timed.profiler.state == "idle"


def test_a_time_window_that_ran_its_minimum_is_kept_at_a_fork(timed):
    open_time_window(timed)
    time.sleep(0.35)
    child_state()
    (window,) = timed.windows()
    assert window["source"] == "time" and window["why"] == "fork"


def test_a_fork_on_another_thread_switches_the_inherited_tracing_off_in_the_child(hooks):
    opened, release = threading.Event(), threading.Event()

    def loop():
        steps(hooks, 3)  # the window runs on this thread
        opened.set()
        release.wait(30)
        hooks.profiler.stop("test end")

    stepping = threading.Thread(target=loop)
    stepping.start()
    try:
        assert opened.wait(30) and hooks.profiler.state == "running"
        state = child_state()  # forked from the main thread: the window cannot be closed here
        assert state["tracer"] is False
        assert hooks.profiler.state == "running"  # the parent's window goes on
    finally:
        release.set()
        stepping.join()
    (window,) = hooks.windows()
    assert window["why"] == "test end"


def test_a_fork_outside_any_window_changes_nothing(hooks):
    steps(hooks, 1)
    assert hooks.profiler.state == "idle"
    assert child_state() == {"profiler": False, "tracer": False}
    assert hooks.profiler.state == "idle" and hooks.profiler.taken == 0
