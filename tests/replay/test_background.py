"""The replay in a forked process gives what the replay in this process gives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpudoctor.collectors.trace_decode import read_trace
from gpudoctor.replay import background
from gpudoctor.replay.scenarios import replay_or_error
from gpudoctor.replay.window import latest_stretch, profiler_steps

WINDOWS = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "windows"


def _same(a, b) -> None:
    """Equal, but for the replay's own run time."""
    assert a is not None and b is not None
    assert dataclasses.replace(a, seconds=None) == dataclasses.replace(b, seconds=None)


@pytest.mark.integration
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_forked_replay_equals_the_replay_in_process(monkeypatch) -> None:
    index = read_trace(WINDOWS / "item_per_layer.trace.json.gz")
    monkeypatch.setattr(background, "PARALLEL_MIN_EVENTS", 0)
    monkeypatch.setattr(background.forking, "spare_core", lambda: True)
    forked = background.start(index, 5)()
    assert forked is not None and forked.error is None and forked.scenarios
    _same(forked, replay_or_error(index, 5))


@pytest.mark.integration
def test_a_replay_whose_process_dies_says_so(monkeypatch) -> None:
    index = read_trace(WINDOWS / "fp32_matmul.trace.json.gz")
    monkeypatch.setattr(background, "PARALLEL_MIN_EVENTS", 0)
    monkeypatch.setattr(background.forking, "spare_core", lambda: True)
    monkeypatch.setattr(background, "_replay_and_send", lambda *args: __import__("os")._exit(3))
    summary = background.start(index, 2)()
    assert summary is not None and summary.error is not None and "exit code 3" in summary.error


def test_small_traces_and_single_cores_replay_in_this_process(monkeypatch) -> None:
    index = read_trace(WINDOWS / "fp32_matmul.trace.json.gz")
    monkeypatch.setattr(background.forking, "spare_core", lambda: False)
    monkeypatch.setattr(background, "PARALLEL_MIN_EVENTS", 0)
    summary = background.start(index, 2)()  # a fork here would fail: tests without the marker may not fork
    assert summary is not None and summary.error is None
    _same(summary, replay_or_error(index, 2))


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
