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
