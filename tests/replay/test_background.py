"""The replay in the helper process gives what the replay in this process gives; the part
of a long window replayed begins at a step boundary."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from gpudoctor.collectors.trace_decode import read_trace
from gpudoctor.replay import background
from gpudoctor.replay.scenarios import replay_or_error
from gpudoctor.replay.window import latest_stretch, profiler_steps
from gpudoctor.run import analyze_helper as helper_module
from gpudoctor.run.analyze_helper import Helper

WINDOWS = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "windows"
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")


def _same(a, b) -> None:
    """Equal, but for the replay's own run time."""
    assert a is not None and b is not None
    assert dataclasses.replace(a, seconds=None) == dataclasses.replace(b, seconds=None)


@pytest.fixture
def helped(monkeypatch) -> None:
    """Any window goes to a helper process, and one can start."""
    monkeypatch.setattr(background, "PARALLEL_MIN_EVENTS", 0)
    monkeypatch.setattr(helper_module, "spare_core", lambda: True)


@pytest.mark.integration
@needs_fork
def test_the_helpers_replay_equals_the_replay_here(helped) -> None:
    """The events travel to the helper (pickled columns) and back comes the same ReplaySummary."""
    index = read_trace(WINDOWS / "tiny_kernels.trace.json.gz")
    part = latest_stretch(index, 10, budget=60_000)[0]  # a part: its scope travels too
    with Helper.start() as helper:
        assert helper.active
        there = background.start(part, 10, helper)()
        assert there is not None and there.error is None and there.scope and there.scenarios
        _same(there, replay_or_error(part, 10))
        whole = background.start(index, 10, helper)()  # within the budget: sent as it is
        _same(whole, replay_or_error(index, 10))


@pytest.mark.integration
@needs_fork
def test_a_helper_that_dies_is_reported_and_replaced_by_this_process(helped, monkeypatch) -> None:
    index = read_trace(WINDOWS / "fp32_matmul.trace.json.gz")
    monkeypatch.setattr(helper_module, "_replay", lambda *args: os._exit(3))
    helper = Helper.start()
    summary = background.start(index, 2, helper)()
    assert summary is not None and summary.error == "the replay's process ended without a result (exit code 3)"
    assert not helper.active
    _same(background.start(index, 2, helper)(), replay_or_error(index, 2))  # no helper left: replayed here


def test_without_a_spare_core_the_replay_runs_here(monkeypatch) -> None:
    index = read_trace(WINDOWS / "fp32_matmul.trace.json.gz")
    monkeypatch.setattr(helper_module, "spare_core", lambda: False)
    monkeypatch.setattr(background, "PARALLEL_MIN_EVENTS", 0)
    helper = Helper.start()  # a fork here would fail: tests without the marker may not fork
    assert not helper.active
    _same(background.start(index, 2, helper)(), replay_or_error(index, 2))


def test_a_long_window_is_replayed_from_a_step_boundary() -> None:
    """A budget smaller than the window: the latest optimizer steps that fit, whole."""
    index = read_trace(WINDOWS / "tiny_kernels.trace.json.gz")
    ends = sorted(e.ts + e.dur for e in index.ops if e.name.startswith("Optimizer.step#"))
    total = len(index.gpu) + len(index.api) + len(index.ops) + len(index.frames)
    part, steps, scope = latest_stretch(index, 10, budget=total // 2)
    assert part.first in ends  # begins where an optimizer step ended
    kept = len(part.gpu) + len(part.api) + len(part.ops) + len(part.frames)
    assert 0 < kept <= total // 2
    inside = sum(end > part.first for end in ends)
    assert 0 < inside < len(ends) and steps == inside  # one optimizer step per training step here
    assert scope.startswith(f"the last {inside} optimizer steps") and f"{kept:,} of {total:,} events" in scope
    assert all(e.ts >= part.first for e in part.ops)
    again = latest_stretch(part, 10, budget=total // 2)
    assert again[0] is part and again[1:] == (steps, scope)  # already chosen: kept as it is
    whole = latest_stretch(index, 10)
    assert whole == (index, 10, "")  # within the budget: the whole window


def test_profiler_steps_counts_the_step_ranges() -> None:
    index = read_trace(WINDOWS / "tiny_kernels.trace.json.gz")
    assert profiler_steps(index) == 0  # the agent's windows mark steps in the Session, not the trace
