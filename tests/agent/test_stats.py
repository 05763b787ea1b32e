"""StepTracker: what a step costs the thread that takes it, and that every step is still written.

A host-bound torch.compile loop (tests/workloads/gpu/compiled_mlp.py: 1,500 steps, so each
step's backward and optimizer events are written, none aggregated) ran 8.4% slower under
diagnose on an H200. Two step events a step went through the event writer on the stepping
thread (6 us there, a getpid and the writer's lock each) and through the generic encoder on
the agent's thread (31 us, holding the GIL the loop waits for), on the 2-core CPU VM. Now a
step leaves a tuple on the stepping thread and the agent's thread writes the events.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from gpudoctor import agent as agent_module
from gpudoctor.agent.stats import StepTracker
from gpudoctor.collectors.events import EventReader
from gpudoctor.session import Session

AGENT_DIR = str(Path(agent_module.__file__).parent)


class Hooks:
    """What StepTracker needs from TorchHooks, around a real Agent writing real files."""

    def __init__(self, directory: Path, **config: object) -> None:
        self.agent = agent_module.Agent(str(directory), {**agent_module.DEFAULT_CONFIG, **config})
        self.stepped: list[tuple[str, int]] = []

    def on_step(self, source: str, n: int) -> None:
        self.stepped.append((source, n))


@pytest.fixture
def hooks(tmp_path):
    made = Hooks(tmp_path)
    yield made
    made.agent.writer.close()


def agent_calls(fn) -> dict[str, int]:
    """Python functions of the agent that fn() runs on this thread, with their call counts."""
    calls: dict[str, int] = {}

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(AGENT_DIR):
            name = Path(frame.f_code.co_filename).name + ":" + frame.f_code.co_name
            calls[name] = calls.get(name, 0) + 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def written(directory: Path, pid: int | None = None) -> list[dict]:
    path = directory / f"events-{pid or os.getpid()}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_step_costs_the_stepping_thread_no_event_writing(hooks, tmp_path):
    steps = StepTracker(hooks)
    for _ in range(3):  # the first step of each source has no duration; the first event is written at once
        steps.boundary("backward")
        steps.boundary("optimizer")

    def loop():
        for _ in range(50):
            steps.add_backward(0.001)
            steps.boundary("backward")
            steps.boundary("optimizer")

    calls = agent_calls(loop)
    # per step: add_backward and two boundaries, and nothing of the event writer
    assert calls == {"stats.py:add_backward": 50, "stats.py:boundary": 100}
    assert len(steps.records) == 3 + 100  # every step but the first written waits for the agent's thread

    before = time.time()
    steps.flush()  # the agent's thread, every flush interval
    hooks.agent.writer.close()
    events = [e for e in written(tmp_path) if e["k"] == "step"]
    assert [(e["src"], e["n"]) for e in events] == [
        (source, n) for n in range(2, 54) for source in ("backward", "optimizer")]
    assert all(e["ts"] <= before for e in events)  # each carries the time of its step, not the write's
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    assert all(e["bwd"] == 0.001 for e in events[-100:]) and "bwd" not in events[0]
    assert list(events[-1]) == ["src", "n", "dur", "wait", "bwd", "k", "ts"]  # the wire order, as emit writes it

    session = Session()
    EventReader(tmp_path, 0.0).apply(session)
    assert session.steps is not None and session.steps.source == "optimizer" and session.steps.count == 53


def test_steps_past_the_cap_are_summed_as_before(tmp_path):
    hooks = Hooks(tmp_path, step_events_max=3)
    steps = StepTracker(hooks)
    for _ in range(10):
        steps.boundary("optimizer")
    steps.flush()
    hooks.agent.writer.close()
    events = written(tmp_path)
    assert [e["n"] for e in events if e["k"] == "step"] == [2, 3]
    [agg] = [e for e in events if e["k"] == "steps_agg"]
    assert agg["n"] == 7 and agg["total"] == 10
    assert hooks.stepped == [("optimizer", n) for n in range(1, 11)]


@pytest.mark.integration  # os.fork
def test_a_forked_child_writes_its_own_steps_and_never_its_parents(hooks, tmp_path):
    steps = StepTracker(hooks)
    for _ in range(5):
        steps.boundary("optimizer")
    assert len(steps.records) == 3  # not written yet: the parent's agent thread writes them
    pid = os.fork()
    if pid == 0:
        try:
            for _ in range(3):
                steps.boundary("optimizer")  # the child's first one is written at once
            steps.flush()
            hooks.agent.writer.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    steps.flush()
    hooks.agent.writer.close()
    assert [e["n"] for e in written(tmp_path, pid) if e["k"] == "step"] == [6, 7, 8]
    assert [e["n"] for e in written(tmp_path) if e["k"] == "step"] == [2, 3, 4, 5]
