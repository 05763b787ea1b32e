"""`analyze` finds the data stall a trace shows: per-step data wait from the DataLoader
``__next__`` ranges, with and without ProfilerStep ranges, on CPU and CUDA traces.

tests/fixtures/cpu_traces were recorded on CPU by scripts/record_cpu_traces.py (the
input-bound loop of tests/workloads/input_bound_entry.py under torch.profiler); the CUDA
traces are gpudoctor's own H200 windows (tests/fixtures/h200/windows: no ProfilerStep ranges).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudoctor.collectors.trace_decode import index_events
from gpudoctor.collectors.trace_loader import loader_steps
from gpudoctor.commands.analyze import session_from_trace
from gpudoctor.verdict.judge import judge

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CPU = FIXTURES / "cpu_traces"
H200 = FIXTURES / "h200" / "windows"


def analyzed(path: Path) -> tuple[Any, dict[str, Any]]:
    session = session_from_trace(path)
    report, _ = judge(session)
    return session, report


def finding(report: dict[str, Any], check_id: str) -> dict[str, Any] | None:
    return next((f for f in report["findings"] if f["id"] == check_id), None)


def outcome(report: dict[str, Any], check_id: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["id"] == check_id)


@pytest.mark.parametrize(("name", "source"), [("input_bound", "explicit"), ("input_bound_unmarked", "loader")])
def test_cpu_trace_of_an_input_bound_loop_finds_the_stall_and_sizes_the_workers(name, source):
    session, report = analyzed(CPU / f"{name}.pt.trace.json.gz")
    assert session.steps.source == source and session.steps.count >= 10
    assert report["summary"]["data_wait_share"] >= 0.3  # the profiler's overhead lengthens the model's part
    assert report["summary"]["verdict"].startswith("Input-bound")
    stall = finding(report, "GD102")
    assert stall is not None and stall["severity"] == "critical"
    assert stall["evidence"]["stall_kind"]["value"] == "cpu-bound"  # operators fill the __next__ ranges
    workers = finding(report, "GD101")
    assert workers is not None and workers["evidence"]["num_workers"]["value"] == 0
    recommended = workers["evidence"]["recommended_workers"]["value"]
    assert recommended >= 1 and f"num_workers={recommended}" in workers["remedy"]["code"]
    assert "usable cores were not measured" in workers["message"].lower()  # a trace does not say
    assert outcome(report, "GD103")["status"] == "skipped"  # no CPU samples in a trace
    assert any("usable cores are not in a trace" in note for note in session.notes)


def test_cpu_trace_with_worker_processes_finds_the_stall_but_cannot_size_them():
    session, report = analyzed(CPU / "input_bound_workers1.pt.trace.json.gz")
    assert session.loaders[0].fetch_batches == 0  # produced in the workers: not in the trace
    assert finding(report, "GD102") is not None
    assert finding(report, "GD101") is None  # neither the count nor the cost per batch is known
    assert any("a trace does not record" in note for note in session.notes)


@pytest.mark.parametrize(("name", "workers"), [("starved_loader", 0), ("loader_starved_gpu", 1)])
def test_cuda_window_without_profiler_steps_gets_one_step_per_batch(name, workers):
    session, report = analyzed(H200 / f"{name}.trace.json.gz")
    assert session.steps.source == "loader" and session.steps.count >= 3
    assert session.loaders[0].num_workers == workers
    assert report["summary"]["data_wait_share"] >= 0.5
    assert finding(report, "GD102") is not None


def test_a_trace_without_dataloader_batches_says_the_data_wait_is_unknown():
    session, report = analyzed(H200 / "healthy.trace.json.gz")
    assert "DataLoader" in session.fact("loader")
    assert outcome(report, "GD102")["status"] == "skipped"
    verdict = report["summary"]["verdict"]
    assert verdict.startswith("Data wait not measured: loader: the profiler trace holds no DataLoader")


def _event(name: str, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}


def test_the_wait_of_each_step_is_the_time_its_next_ranges_cover():
    """Steps of 100 us with a 40, 60 and 80 us __next__ range inside, and one straddling
    a step boundary (its part inside each step counts there)."""
    next_name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = [_event(f"ProfilerStep#{n}", 100.0 * n, 100.0) for n in range(4)]
    events += [_event(next_name, 0.0, 40.0), _event(next_name, 100.0, 60.0), _event(next_name, 200.0, 80.0),
               _event(next_name, 290.0, 20.0)]
    found = loader_steps(index_events({"traceEvents": events}))
    assert found is not None and found.source == "profiler steps" and found.single_process
    assert found.durations_s == pytest.approx([1e-4] * 4)
    assert found.waits_s == pytest.approx([40e-6, 60e-6, 90e-6, 10e-6])
    assert found.batches == 4 and found.wait_max_s == pytest.approx(80e-6)


def test_without_profiler_steps_a_step_runs_from_one_batch_to_the_next():
    next_name = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    events = [_event(next_name, t, 30.0) for t in (0.0, 100.0, 250.0, 300.0)]
    found = loader_steps(index_events({"traceEvents": events}))
    assert found is not None and found.source == "batches" and not found.single_process
    assert found.durations_s == pytest.approx([100e-6, 150e-6, 50e-6])
    assert found.waits_s == pytest.approx([30e-6] * 3)


def test_no_steady_state_from_two_batches():
    next_name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert loader_steps(index_events({"traceEvents": [_event(next_name, 0.0, 5.0),
                                                      _event(next_name, 9.0, 5.0)]})) is None
