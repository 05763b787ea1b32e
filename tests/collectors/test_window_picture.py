"""The GPU's idle gaps by cause, and the picture of the drawn steps (collectors/window_picture.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_trace import TraceBuilder

from gpudoctor.base.idle_causes import IDLE_CAUSES
from gpudoctor.collectors.trace import summarize_trace
from gpudoctor.session import Session


def _step(t: TraceBuilder, at: float, *, wait: float = 0.0, sync: bool = False, optimizer: bool = False) -> float:
    """One step from `at`: an optional DataLoader wait, a kernel, an optional sync; returns its end."""
    t._x("user_annotation", "ProfilerStep#1", at, 1.0)  # a mark per step (name reused: one distinct step)
    if wait:
        t._x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", at, wait)
    launch_at = at + wait + 5
    if optimizer:
        t._x("user_annotation", "Optimizer.step#SGD.step", launch_at - 2, 20)
    corr = t.launch(launch_at, 5)
    t.kernel("elementwise", launch_at + 10, 100, corr=corr)
    end = launch_at + 110
    if sync:
        t.api("cudaDeviceSynchronize", launch_at + 6, 105)
    return end


def test_causes_split_the_idle_time_exactly() -> None:
    t = TraceBuilder()
    at = 0.0
    for kind in ("wait", "plain", "sync", "optimizer", "wait", "plain"):
        at = _step(t, at, wait=400.0 if kind == "wait" else 0.0, sync=kind == "sync",
                   optimizer=kind == "optimizer") + 50
    s = summarize_trace(t.data())
    assert set(s.idle_by_cause_us) <= set(IDLE_CAUSES)
    assert sum(s.idle_by_cause_us.values()) == pytest.approx(s.gpu_idle_us, abs=1e-3)
    # the second DataLoader wait (the first comes before any GPU work) is data, not launch overhead
    assert s.idle_by_cause_us["data"] > 400
    assert s.idle_by_cause_us["data"] > s.idle_by_cause_us.get("launch", 0.0)


def test_a_gap_while_the_host_waits_for_data_is_data_and_a_late_launch_is_launch() -> None:
    t = TraceBuilder()
    end = _step(t, 0.0)
    end = _step(t, end + 1000.0, wait=0.0)  # the host simply launched late: launch overhead
    _step(t, end + 10, wait=900.0)  # waited 900 us for a batch
    s = summarize_trace(t.data())
    assert s.idle_by_cause_us["data"] == pytest.approx(915.0, abs=20)
    assert s.idle_by_cause_us["launch"] == pytest.approx(1015.0, abs=20)


def test_picture_draws_the_last_steps_with_gaps_and_rows() -> None:
    t = TraceBuilder()
    at = 0.0
    for i in range(6):
        at = _step(t, at, wait=300.0 if i % 2 else 0.0)
        t._x("user_annotation", f"ProfilerStep#{i + 2}", at, 1.0)
        at += 20
    s = summarize_trace(t.data())
    p = s.picture
    assert p is not None
    assert p.steps >= 1 and p.span_us > 0
    kinds = [row.kind for row in p.rows]
    assert "gpu" in kinds and "cpu" in kinds and "data" in kinds
    gaps = [p.gaps[i:i + 4] for i in range(0, len(p.gaps), 4)]
    assert gaps and all(0 <= g[0] <= p.span_us and g[1] > 0 for g in gaps)
    assert {IDLE_CAUSES[int(g[2])] for g in gaps} <= set(IDLE_CAUSES)
    drawn = sum(g[1] for g in gaps) + sum(sum(v) for v in p.idle_bins.values())
    assert drawn == pytest.approx(sum(p.idle_by_cause_us.values()), rel=1e-3)


def test_no_gpu_work_no_picture() -> None:
    t = TraceBuilder()
    t.op("aten::add", 0, 10)
    s = summarize_trace(t.data())
    assert s.picture is None and s.idle_by_cause_us == {}


@pytest.mark.parametrize("name", ["loader_starved_gpu", "item_per_layer"])
def test_recorded_sessions_hold_what_their_windows_give(name: str) -> None:
    """The H200 fixtures' pictures were added by scripts/picture_fixture.py: they must be what
    this checkout computes from the window recorded with them (rewrite them when it changes)."""
    h200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
    stored = Session.load(h200 / f"{name}.session.json").profile
    fresh = summarize_trace(h200 / "windows" / f"{name}.trace.json.gz")
    assert stored is not None
    assert fresh.idle_by_cause_us == stored.idle_by_cause_us
    assert fresh.picture == stored.picture
    assert sum(stored.idle_by_cause_us.values()) == pytest.approx(stored.gpu_idle_us, abs=0.01)
