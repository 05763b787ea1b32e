"""The agent's profiler windows on CPU, driven the way the workload's thread drives them."""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch
from agent_fakes import FakeHooks
from torch.nn.modules import module as nn_module

from gpudoctor.agent import profiler

MODEL = torch.nn.Linear(8, 8)


@pytest.fixture
def make(tmp_path):
    made = []

    def build(**config):
        defaults = {"profile_warmup_steps": 2, "profile_warmup_s": 0.0, "profile_steps": 3, "profile_min_window_s": 0.0,
                    "profile_no_step_after_s": 0.0, "profile_time_window_s": 0.2}
        hooks = FakeHooks(tmp_path, **{**defaults, **config})
        made.append(hooks)
        return hooks

    yield build
    for hooks in made:
        hooks.safepoints.disarm()
        if hooks.profiler.state == hooks.profiler.RUNNING:
            hooks.profiler.stop("test end")
    assert "to" not in torch.Tensor.__dict__ and "item" not in torch.Tensor.__dict__  # never left behind
    assert not nn_module._global_forward_pre_hooks


def steps(hooks, source, n, pause=0.0):
    for _ in range(n):
        hooks.steps.boundary(source)
        if pause:
            time.sleep(pause)


def test_a_step_window_opens_after_warmup_and_closes_after_its_steps(make, tmp_path):
    hooks = make()
    steps(hooks, "optimizer", 2)
    assert hooks.profiler.state == "idle"
    steps(hooks, "optimizer", 1)
    assert hooks.profiler.state == "running"
    steps(hooks, "optimizer", 3)
    (window,) = hooks.windows()
    assert window["label"] == "start" and window["source"] == "optimizer" and window["steps"] == 3
    assert (tmp_path / window["path"]).is_file()


class _StoppedClock:
    """The time module, with a wall clock that moves only when the test says (so "10 steps
    in no time" holds however loaded the machine is)."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


def test_a_short_window_waits_for_its_minimum_length(make, monkeypatch):
    from gpudoctor.agent import profiler as profiler_module

    clock = _StoppedClock()
    monkeypatch.setattr(profiler_module, "time", clock)
    hooks = make(profile_min_window_s=0.3, profile_max_steps=1000)
    steps(hooks, "forward", 3)
    assert hooks.profiler.state == "running"
    steps(hooks, "forward", 10)
    assert hooks.profiler.state == "running"  # 10 steps in no time: not yet 0.3 s
    clock.now += 0.35
    steps(hooks, "forward", 1)
    (window,) = hooks.windows()
    assert window["steps"] == 11 and window["t_end"] - window["t_start"] >= 0.3


def _timed_window(make, monkeypatch, pauses, **config):
    """The window of a loop whose steps after the window opens take PAUSES seconds (a stopped clock),
    and whether it was still running before its last step."""
    from gpudoctor.agent import profiler as profiler_module

    clock = _StoppedClock()
    monkeypatch.setattr(profiler_module, "time", clock)
    hooks = make(**{"profile_steps": 10, "profile_window_budget_s": 2.0, "profile_min_steps": 3, **config})
    steps(hooks, "optimizer", 3)
    running = []
    for pause in pauses:
        running.append(hooks.profiler.state == "running")
        clock.now += pause
        steps(hooks, "optimizer", 1)
    windows = hooks.windows()
    return (windows[0] if windows else None), running


def test_a_window_of_slow_steps_closes_at_its_budget_once_it_holds_the_minimum(make, monkeypatch):
    """10 steps asked, each 1.5 s: the window stops after 3 of them (2 s budget), not after 15 s of trace;
    never with fewer than the minimum, however long its steps."""
    window, running = _timed_window(make, monkeypatch, [1.5] * 3)
    assert all(running) and window["steps"] == 3 and window["why"] == "budget"


def test_one_stall_among_fast_steps_does_not_close_the_window_at_the_budget(make, monkeypatch):
    """Fast steps with one 2.5 s stall (an epoch's workers starting, a checkpoint) among the first three:
    the budget is for slow steps, and the window still takes its 10."""
    window, running = _timed_window(make, monkeypatch, [0.05, 2.5] + [0.05] * 8)
    assert all(running) and window["steps"] == 10 and window["why"] == "steps"


def test_steps_asked_for_are_not_cut_by_a_budget_of_zero(make, monkeypatch):
    window, running = _timed_window(make, monkeypatch, [1.5] * 5, profile_steps=5, profile_window_budget_s=0.0)
    assert all(running) and window["steps"] == 5 and window["why"] == "steps"


def test_a_window_of_fast_steps_is_not_cut_by_the_budget(make, monkeypatch):
    window, running = _timed_window(make, monkeypatch, [0.1] * 10)
    assert all(running) and window["steps"] == 10 and window["why"] == "steps"


def test_a_run_that_ends_inside_its_window_keeps_what_was_recorded(make, tmp_path):
    hooks = make(profile_steps=1000)
    steps(hooks, "optimizer", 5)
    assert hooks.profiler.state == "running"
    hooks.profiler.stop("exit")  # what the agent's exit handler does
    (window,) = hooks.windows()
    assert window["why"] == "exit" and window["steps"] == 2 and (tmp_path / window["path"]).is_file()


def test_a_new_phase_gets_its_own_window_and_a_later_epoch_another(make):
    hooks = make(profile_later_s=0.0)
    hooks.tls.last_loader = "1:0"
    hooks.loader_epochs["1:0"] = 1
    steps(hooks, "loader", 6)  # training: start window
    with torch.no_grad():
        hooks.tls.last_loader = "1:1"  # an evaluation loader under no_grad
        steps(hooks, "loader", 6)
    hooks.tls.last_loader = "1:0"
    steps(hooks, "loader", 6)  # training again: seen already, same epoch: nothing
    hooks.loader_epochs["1:0"] = 2
    steps(hooks, "loader", 6)  # a new epoch of the training loader: the later window
    steps(hooks, "loader", 12)
    labels = [(w["label"], w["loader"], w["grad"]) for w in hooks.windows()]
    assert labels == [("start", "1:0", True), ("phase", "1:1", False), ("later", "1:0", True)]
    assert [w["index"] for w in hooks.windows()] == [1, 2, 3]


def test_windows_stop_at_the_maximum(make):
    hooks = make(profile_max_windows=1)
    steps(hooks, "optimizer", 6)
    with torch.no_grad():
        steps(hooks, "optimizer", 12)
    assert len(hooks.windows()) == 1 and hooks.profiler.state == "done"


def test_a_lower_precedence_source_does_not_drive_the_window(make):
    hooks = make()
    for _ in range(8):
        hooks.steps.boundary("optimizer")
        hooks.steps.boundary("forward")  # a forward inside each optimizer step
    (window,) = hooks.windows()
    assert window["source"] == "optimizer"


def test_a_stepless_module_less_loop_gets_a_time_window_at_a_tensor_copy(make, tmp_path):
    hooks = make(profile_time_max_calls=10**9)
    hooks.profiler.poll()  # the agent's thread: due at once, arms the safe points
    assert "to" in torch.Tensor.__dict__
    x = torch.ones(4)
    deadline = time.time() + 5
    while not hooks.windows() and time.time() < deadline:
        x = x.to(torch.float64).to(torch.float32)  # the main thread's copies open, then close it
    (window,) = hooks.windows()
    assert window["source"] == "time" and window["label"] == "start" and window["why"] == "time"
    assert 0.2 <= window["t_end"] - window["t_start"] < 3.0
    assert (tmp_path / window["path"]).is_file()
    assert "to" not in torch.Tensor.__dict__  # disarmed once the window closed


def test_the_time_window_also_closes_after_its_call_budget(make):
    hooks = make(profile_time_window_s=60.0, profile_time_max_calls=20)
    hooks.profiler.poll()
    x = torch.ones(())
    for _ in range(40):
        x.item()
    (window,) = hooks.windows()
    assert window["why"] == "time" and window["t_end"] - window["t_start"] < 30


def test_a_step_during_the_time_window_discards_it_for_the_step_window(make):
    hooks = make(profile_time_window_s=60.0)
    hooks.profiler.poll()
    MODEL(torch.ones(2, 8))  # a forward is a safe point too
    assert hooks.profiler.state == "running" and hooks.profiler.window.source == "time"
    hooks.steps.boundary("optimizer")
    assert hooks.profiler.state == "idle" and not hooks.windows()
    assert "to" not in torch.Tensor.__dict__ and not nn_module._global_forward_pre_hooks
    hooks.profiler.poll()  # steps are active now: no second time window
    assert not hooks.safepoints.armed


def test_no_time_window_under_torch_compile_and_the_reason_at_exit_when_no_step_came(make):
    hooks = make()
    hooks.compile_used = True
    hooks.profiler.poll()
    assert not hooks.safepoints.armed and hooks.profiler.state == "idle" and not hooks.kind("profile")
    hooks.profiler.exit_note()
    (event,) = hooks.kind("profile")
    assert "torch.compile" in event["error"]


def test_a_compiled_loop_whose_first_step_outlasts_the_quiet_time_still_gets_its_step_window(make):
    """Compiling the first step takes longer than profile_no_step_after_s: the agent's thread
    sees a quiet CUDA run first; the steps that follow still get the step-driven window."""
    hooks = make()
    hooks.compile_used = True
    hooks.profiler.poll()  # quiet so far: no time window under torch.compile
    steps(hooks, "optimizer", 3)
    assert hooks.profiler.state == "running" and hooks.profiler.window.source == "optimizer"
    steps(hooks, "optimizer", 3)
    (window,) = hooks.windows()
    assert window["source"] == "optimizer" and window["steps"] == 3
    hooks.profiler.exit_note()
    assert all("error" not in e for e in hooks.kind("profile"))


def test_no_time_window_before_the_run_went_quiet(make):
    hooks = make(profile_no_step_after_s=30.0)
    hooks.profiler.poll()
    assert not hooks.safepoints.armed
    hooks.cuda = False
    hooks.profiler.cuda_seen = 0.0  # long ago, but CUDA is not in use: no stepless window on CPU
    hooks.profiler.poll()
    assert not hooks.safepoints.armed


def test_calls_on_other_threads_neither_open_nor_close_the_time_window(make):
    hooks = make()
    hooks.profiler.poll()
    helper = threading.Thread(target=lambda: [torch.ones(2).to(torch.float64) for _ in range(50)])
    helper.start()
    helper.join()
    assert hooks.profiler.state == "idle"
    torch.ones(2).to(torch.float64)
    assert hooks.profiler.state == "running"


def test_a_window_on_another_thread_is_kept_when_that_thread_ends(make, tmp_path):
    hooks = make(profile_steps=1000)

    def loop():
        steps(hooks, "explicit", 5)  # opens the window on this thread, never reaches its steps

    worker = threading.Thread(target=loop)
    worker.start()
    worker.join()
    (window,) = hooks.windows()
    assert window["why"] == "thread-end" and (tmp_path / window["path"]).is_file()


def _live_results() -> int:
    """torch's autograd profiles still alive that hold a window's recorded events."""
    import gc

    from torch.autograd import profiler as autograd_profiler

    return sum(1 for o in gc.get_objects()
               if isinstance(o, autograd_profiler.profile) and getattr(o, "kineto_results", None) is not None)


@pytest.mark.parametrize("keep", [True, False])
def test_a_stopped_window_frees_its_events_at_once_not_at_a_later_garbage_collection(make, keep):
    # torch.profiler.profile refers to itself: let go, it waits for the cyclic collector, which
    # then frees the whole window's events in one pause in the middle of the user's loop
    import gc

    hooks = make()
    gc.collect()
    before = _live_results()
    gc.disable()
    try:
        steps(hooks, "optimizer", 3)
        assert hooks.profiler.state == "running"
        if keep:
            steps(hooks, "optimizer", 3)
            assert hooks.windows()
        else:
            hooks.profiler.stop("superseded", keep=False)
        assert hooks.profiler.state != "running"
        assert _live_results() == before
    finally:
        gc.enable()


def _python_calls(n: int) -> int:
    """N small Python calls: what the Python tracer of a window with stacks records one event for each."""
    total = 0
    for i in range(n):
        total += abs(i)
    return total


def _frames(path) -> int:
    import json

    events = json.loads(path.read_text())["traceEvents"]
    return sum(1 for e in events if e.get("cat") == "python_function")


def _two_phases(hooks, calls: int) -> list[dict]:
    """A training phase, then an evaluation phase under no_grad: two windows, each step making CALLS Python calls."""
    for _ in range(6):
        hooks.steps.boundary("optimizer")
        _python_calls(calls)
    with torch.no_grad():
        for _ in range(6):
            hooks.steps.boundary("optimizer")
            _python_calls(calls)
    return hooks.windows()


def test_after_a_stop_that_held_the_loop_later_windows_record_no_python_stacks(make, tmp_path, monkeypatch):
    """A window's stop costs about 5 us per traced Python call (a loop making its batches in its own
    process held 15-31 s): once one held the loop past the limit, the next window traces operators
    only, and its stop is short."""
    monkeypatch.setattr(profiler, "STOP_S_PER_CALL", 0.0)  # no stop predicted: the first window has stacks
    hooks = make(profile_stop_held_s=1e-6)  # any stop holds the loop past this limit
    first, second = _two_phases(hooks, 20000)
    assert first["stacks"] is True and first["stop_s"] > 0 and _frames(tmp_path / first["path"]) >= 3 * 20000
    assert second["label"] == "phase" and second["stacks"] is False
    assert _frames(tmp_path / second["path"]) == 0
    assert second["stop_s"] < first["stop_s"]


def test_stops_under_the_limit_leave_stacks_in_every_window(make, tmp_path):
    hooks = make()  # the default limit, 2 s: a window of 3 small steps stops in milliseconds
    windows = _two_phases(hooks, 200)
    assert [w["stacks"] for w in windows] == [True, True]
    assert all(_frames(tmp_path / w["path"]) >= 3 * 200 for w in windows)
    assert all(0 < w["stop_s"] < 2.0 for w in windows)


@pytest.mark.parametrize("device, synced", [("cuda", 1), (None, 0)])
def test_the_stop_drains_the_gpu_only_where_torchs_own_stop_would(make, monkeypatch, device, synced):
    """The GPU's queued work is waited for before torch's stop so that the stop is timed on its own; torch's
    stop synchronizes the device it traced anyway, and where it would not, no synchronisation is added."""
    from types import SimpleNamespace

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    hooks = make()
    window = SimpleNamespace(cuda=True)
    hooks.profiler._drain(window, SimpleNamespace(profiler=SimpleNamespace(use_device=device)))
    assert len(calls) == synced
    hooks.profiler._drain(SimpleNamespace(cuda=False), SimpleNamespace(profiler=SimpleNamespace(use_device="cuda")))
    assert len(calls) == synced  # a window that traced no CUDA never waits for the GPU


def test_a_phase_whose_steps_would_make_a_long_stop_gets_a_window_without_python_stacks(make, tmp_path):
    """The last warm-up step is counted (a profile function): 20,000 Python calls a step, over the 3 steps the window
    runs, predict a stop of 20,000 x 3 x 6 us = 0.36 s with stacks, past a limit of 0.1 s. So the window
    records operators only, and its event says what was counted (the span that leaves the step out)."""
    hooks = make(profile_stop_held_s=0.1)
    began = time.time()
    (window,) = _two_phases(hooks, 20000)[:1]
    counted = window["counted"]
    assert window["stacks"] is False and _frames(tmp_path / window["path"]) == 0
    assert 20000 <= counted["calls"] < 21000  # the loop's calls and the step boundary's own few
    assert counted["stop_predicted_s"] == pytest.approx(counted["calls"] * 3 * profiler.STOP_S_PER_CALL, rel=1e-3)
    assert began <= counted["t_start"] < counted["t_start"] + counted["duration_s"] <= window["t_start"]
    assert sys.getprofile() is None and hooks.profiler.counting is None  # the count is off once the step ended


def test_a_phase_of_few_python_calls_keeps_its_stacks_and_says_what_was_counted(make, tmp_path):
    hooks = make()  # the default limit, 2 s
    first, second = _two_phases(hooks, 200)
    for window in (first, second):  # each phase counts its own warm-up step
        assert window["stacks"] is True and 200 <= window["counted"]["calls"] < 1000
        assert window["counted"]["stop_predicted_s"] < 0.1


def test_no_step_is_counted_while_another_profiler_holds_the_hook(make, tmp_path):
    """The workload's own profile function (a debugger, coverage, its cProfile) is left alone: no count, and
    the window records stacks as before."""
    seen = []
    sys.setprofile(lambda frame, event, arg: seen.append(event) if len(seen) < 10 else None)
    try:
        hooks = make(profile_stop_held_s=1e-6)
        steps(hooks, "optimizer", 6)
    finally:
        sys.setprofile(None)
    (window,) = hooks.windows()
    assert window["stacks"] is True and "counted" not in window


def test_a_fork_while_a_step_is_counted_stops_the_count(make):
    """A child forked in the counted step would keep the hook on its thread for good: the fork ends the count
    (not kept), and the phase's window records stacks as it would without one."""
    hooks = make()
    steps(hooks, "optimizer", 2)  # the phase began, and its warm-up step's count with the second boundary
    assert hooks.profiler.counting is not None
    hooks.profiler._before_fork()
    assert hooks.profiler.counting is None and sys.getprofile() is None
    steps(hooks, "optimizer", 4)
    (window,) = hooks.windows()
    assert window["stacks"] is True and "counted" not in window


def test_the_fetch_profile_waits_while_a_step_is_counted(make, tmp_path):
    from gpudoctor.agent.fetch_profile import FetchProfiler

    hooks = make()
    hooks.fetch_profiler = fetch = FetchProfiler(hooks)
    (tmp_path / "fetch-profile.request").write_text("loader")
    steps(hooks, "optimizer", 2)
    assert hooks.profiler.counting is not None
    assert fetch.begin() is False  # claimed, but the hook is the count's for this step
    steps(hooks, "optimizer", 4)  # the count's step ended, then the window's three
    assert hooks.profiler.counting is None and hooks.profiler.state != "running"
    assert fetch.begin() is True
    fetch.end(0.001)
    fetch.finish()


def test_a_profiler_the_workload_sets_during_the_counted_step_stays_and_the_count_is_not_kept(make):
    def theirs(frame, event, arg):
        return None

    count = profiler.StepCount("optimizer", ())
    sys.setprofile(theirs)  # e.g. the workload's own profiler, started inside the counted step
    try:
        assert count.end() is False and sys.getprofile() is theirs
    finally:
        sys.setprofile(None)
    hooks = make()
    steps(hooks, "optimizer", 2)
    assert hooks.profiler.counting is not None
    sys.setprofile(theirs)
    steps(hooks, "optimizer", 4)  # the window opened at the count's end (torch's stack tracer took the hook)
    (window,) = hooks.windows()
    assert window["stacks"] is True and "counted" not in window


def test_a_count_abandoned_from_another_thread_is_ended_by_the_counting_thread(make):
    """torch.compile called on another thread abandons the count; only the counting thread can take its hook
    off (sys.setprofile is per thread), which it does at its next boundary."""
    hooks = make()
    steps(hooks, "optimizer", 2)
    counting = hooks.profiler.counting
    other = threading.Thread(target=hooks.profiler.disarm)
    other.start()
    other.join()
    assert hooks.profiler.counting is counting and sys.getprofile() == counting._count  # still this thread's
    steps(hooks, "optimizer", 1)  # taken off (the window that opened then set torch's stack tracer)
    assert hooks.profiler.counting is None and sys.getprofile() != counting._count
    steps(hooks, "optimizer", 3)
    (window,) = hooks.windows()
    assert window["stacks"] is True and "counted" not in window


@pytest.mark.parametrize("config, expected", [
    ({}, 3),  # the fixture's 3 steps, no minimum length
    ({"profile_steps": 10, "profile_min_window_s": 10.0, "profile_max_steps": 1_000_000}, None),  # by its length
])
def test_the_steps_a_window_is_expected_to_run_are_found_in_a_few_looks(make, monkeypatch, config, expected):
    """The prediction asks the window's closing rule how many steps of the counted length it would run: by
    bisection, so a window allowed a million steps costs the step that opens it a few dozen looks."""
    hooks = make(**config)
    looks = []
    ended = hooks.profiler._ended
    monkeypatch.setattr(hooks.profiler, "_ended", lambda k, *times: looks.append(k) or ended(k, *times))
    count = profiler.StepCount("optimizer", ("key",))
    count.end()
    count.calls, count.took = 1000, 0.001
    hooks.profiler.counts[("key",)] = count
    window = profiler._Window("optimizer", "start", 0, ("key",), 1, False)
    stacks = hooks.profiler._stacks(window)
    assert len(looks) <= 25
    steps = round(window.predicted_s / (1000 * profiler.STOP_S_PER_CALL))
    assert steps == (expected or 10_000)  # 10 s of 1 ms steps
    assert stacks is (window.predicted_s < 2.0)  # 3 steps: 18 ms; 10,000 steps: 60 s


def test_a_short_counted_step_in_a_phase_of_longer_steps_predicts_the_phases_steps(make):
    """A host that runs ahead of the GPU queues a step in milliseconds; the window's steps then take the GPU's
    time. With a 0.3 s minimum window, a 4 ms counted step would say 75 steps; the phase's 25 ms steps say 12."""
    hooks = make(profile_steps=10, profile_min_window_s=0.3)
    count = profiler.StepCount("optimizer", ("key",))
    count.end()
    count.calls, count.took = 4500, 0.004
    hooks.profiler.counts[("key",)] = count
    hooks.profiler.phase = (("key",), 0, 100.0)
    window = profiler._Window("optimizer", "start", 10, ("key",), 1, False)
    window.start_wall = 100.25  # 10 steps of 25 ms before it
    assert hooks.profiler._stacks(window) is True
    assert round(window.predicted_s / (4500 * profiler.STOP_S_PER_CALL)) == 12
    hooks.profiler.phase = None  # the phase not known: the counted step's length, and a stop past 2 s
    assert hooks.profiler._stacks(window) is False
    assert round(window.predicted_s / (4500 * profiler.STOP_S_PER_CALL)) == 75
