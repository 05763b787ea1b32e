"""The agent's profiler window on CPU, driven the way the workload's thread drives it."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch
from torch.nn.modules import module as nn_module

from gpudoctor.agent.profiler import ProfilerWindow


class FakeHooks:
    """What ProfilerWindow needs from the torch hooks: steps, CUDA state, the agent."""

    def __init__(self, directory, **config):
        self.torch = torch
        self.events = []
        self.agent = SimpleNamespace(config=config, directory=str(directory),
                                     emit=lambda kind, **fields: self.events.append((kind, fields)))
        self.steps = SimpleNamespace(count={"explicit": 0, "optimizer": 0, "loader": 0})
        self.compile_used = False

    def cuda_initialized(self):
        return True

    def allocator_snapshot(self, label):
        return None

    def profiles(self):
        return [fields for kind, fields in self.events if kind == "profile"]


MODEL = torch.nn.Linear(8, 8)


def forward_for(seconds: float) -> None:
    deadline = time.time() + seconds
    with torch.inference_mode():
        while time.time() < deadline:
            MODEL(torch.ones(2, 8))


@pytest.fixture
def hooks(tmp_path):
    made = FakeHooks(tmp_path, profile_no_step_after_s=0.0, profile_time_window_s=0.2)
    yield made
    assert not nn_module._global_forward_pre_hooks  # never left behind


def test_a_stepless_run_gets_a_time_bounded_window_and_the_hook_goes(hooks, tmp_path):
    window = ProfilerWindow(hooks)
    window.poll()  # CUDA "started": due at once
    window.poll()  # the agent's thread waits for the workload: still one hook
    assert len(nn_module._global_forward_pre_hooks) == 1
    forward_for(0.3)
    while window.state == window.RUNNING:  # Kineto can take a while to start on a small machine
        forward_for(0.1)
    (profile,) = hooks.profiles()
    assert profile["source"] == "time" and profile["why"] == "time", profile
    assert 0.2 <= profile["t_end"] - profile["t_start"] < 2.0
    assert (tmp_path / profile["path"]).is_file()
    assert window.state == window.DONE and window.watch is None


def test_a_step_during_the_time_window_discards_it_for_the_step_window(hooks):
    hooks.agent.config["profile_time_window_s"] = 60.0
    window = ProfilerWindow(hooks)
    window.poll()
    MODEL(torch.ones(2, 8))
    assert window.state == window.RUNNING and window.source == "time", hooks.events
    hooks.steps.count["optimizer"] = 1
    window.on_step("optimizer", 1)
    assert window.state == window.IDLE and not hooks.profiles()  # discarded, nothing exported
    assert window.watch is None
    window.poll()  # steps exist now: no second time window
    assert window.watch is None


def test_no_time_window_under_torch_compile(hooks):
    hooks.compile_used = True
    window = ProfilerWindow(hooks)
    window.poll()
    assert window.watch is None and window.state == window.DONE
    (profile,) = hooks.profiles()
    assert "torch.compile" in profile["error"]


def test_a_run_with_steps_never_installs_the_hook(hooks):
    hooks.steps.count["loader"] = 3
    window = ProfilerWindow(hooks)
    window.poll()
    assert window.watch is None and window.state == window.IDLE


def test_forwards_on_other_threads_neither_open_nor_close_the_window(hooks):
    import threading

    window = ProfilerWindow(hooks)
    window.poll()
    helper = threading.Thread(target=forward_for, args=(0.1,))  # as DataParallel's replicas run
    helper.start()
    helper.join()
    assert window.state == window.IDLE
    MODEL(torch.ones(2, 8))  # the main thread's next forward opens it
    assert window.state == window.RUNNING
    window.stop("exit")
    assert window.state == window.DONE and window.watch is None
