"""benchmarks/overhead.py's summary: the per-pair ratios, and the one normalised by the workers' CPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _overhead():
    sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))  # overhead.py imports the corpus runner by name
    spec = importlib.util.spec_from_file_location("overhead_bench", ROOT / "benchmarks" / "overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _run(rate: float, cpu_ms: float | None) -> dict:
    workload = {"workers_cpu_ms_per_batch": cpu_ms} if cpu_ms is not None else {}
    return {"outside": rate, "whole": rate, "unit": "steps/s", "workload": workload}


def test_a_slower_host_core_is_taken_out_by_the_workers_cpu_per_batch():
    """Pair 1: both runs' workers at 40 ms a batch, diagnose 10% slower. Pair 2: diagnose's workers at 50
    ms a batch (a slower core) and its throughput 0.8x: the same loop on a slower core, no cost of its
    own. Pair 3: the diagnose run's workers as fast, its throughput the same."""
    overhead = _overhead()
    runs = {"plain": [_run(50.0, 40.0), _run(50.0, 40.0), _run(50.0, 40.0)],
            "diagnose": [_run(45.0, 40.0), _run(40.0, 50.0), _run(50.0, 40.0)]}
    summary = overhead.summarize(runs)["diagnose"]
    assert summary["outside"] == pytest.approx(0.9)  # the median of 0.9, 0.8, 1.0
    assert summary["per_worker_cpu"] == pytest.approx(1.0)  # the median of 0.9, 1.0, 1.0
    assert "| 0.900 | 0.900 | 1.000 | - |" in overhead.markdown(
        {"machine": "m", "date": "d", "pairs": 3, "workloads": {"w": {"runs": runs, "summary": {"diagnose": summary}}}})


def test_no_normalised_ratio_where_the_workload_reports_no_worker_cpu():
    overhead = _overhead()
    runs = {"plain": [_run(50.0, None)], "diagnose": [_run(49.0, None)]}
    summary = overhead.summarize(runs)["diagnose"]
    assert summary["outside"] == pytest.approx(0.98) and summary["per_worker_cpu"] is None


def test_the_gpu_side_of_a_step_is_compared_where_the_workload_reports_it():
    """loader_reiter reports its pageable copy (which waits for the steps queued before it) and the time to
    queue a step's kernels: a callback left on every launch, or a slower GPU step, raises them under
    diagnose. Pair 1 the same; pair 2 diagnose's GPU side 1.5x; pair 3 without the numbers (not compared)."""
    overhead = _overhead()

    def run(copy: float | None, enqueue: float | None) -> dict:
        said = {"copy_ms_median": copy, "enqueue_ms_median": enqueue} if copy is not None else {}
        return {"outside": 50.0, "whole": 50.0, "unit": "steps/s", "workload": said}

    runs = {"plain": [run(0.1, 1.9), run(0.1, 1.9), run(None, None)],
            "diagnose": [run(0.1, 1.9), run(1.0, 2.0), run(0.1, 2.0)]}
    summary = overhead.summarize(runs)["diagnose"]
    assert summary["gpu_step"] == pytest.approx(1.25)  # the median of 1.0 and 1.5
    assert "| 1.000 | 1.000 | - | 1.250 |" in overhead.markdown(
        {"machine": "m", "date": "d", "pairs": 3, "workloads": {"w": {"runs": runs, "summary": {"diagnose": summary}}}})


def test_a_runs_time_outside_its_steady_steps_is_placed():
    """Synthetic stamps: the first step 3 s after the harness began, 10 steps of 0.1 s, the fifth and sixth
    under a window, the sixth 2 s long (a window's stop): the set-up, the windows' time and the slowest step."""
    overhead = _overhead()
    t = [13.0 + 0.1 * i for i in range(6)] + [15.5 + 0.1 * i for i in range(5)]
    profiled = [False] * 5 + [True] + [False] * 5
    result = overhead.rates({"t": t, "profiled": profiled, "began": 10.0, "ended": 16.0})
    assert result["to_first_step_s"] == pytest.approx(3.0)
    assert result["slowest_step"] == [6, pytest.approx(2.0)]
    assert result["in_windows_s"] == pytest.approx(2.1)  # the step ending in the window, and the one after


def test_a_diagnosed_runs_own_account_of_its_windows_is_kept(tmp_path):
    """The JSON report's summary.profiler_overhead is read back (the Session beside it is not a report);
    a plain run, with no report, has none."""
    overhead = _overhead()
    (tmp_path / "run.session.json").write_text('{"schema": "session"}')
    (tmp_path / "run.json").write_text('{"summary": {"profiler_overhead": {"start_pause_s": 4.3, "windows": 1}}}')
    assert overhead._reported_overhead(tmp_path) == {"start_pause_s": 4.3, "windows": 1}
    assert overhead._reported_overhead(tmp_path / "absent") is None


def test_a_diagnosed_runs_windows_are_read_from_its_session(tmp_path):
    import json

    overhead = _overhead()
    assert overhead._windows(tmp_path) == []  # a plain run writes no Session
    window = {"label": "start", "steps": 82, "stacks": False, "stop_s": 0.2, "counted_calls": 26002,
              "stop_predicted_s": 6.7, "top_kernels": [1, 2, 3]}
    (tmp_path / "r.session.json").write_text(json.dumps({"profiles": [window]}))
    (read,) = overhead._windows(tmp_path)
    assert read["stacks"] is False and read["stop_predicted_s"] == 6.7 and "top_kernels" not in read
    (tmp_path / "r.session.json").write_text("{not json")
    assert overhead._windows(tmp_path) == []
