"""Step boundaries in every shape, profiler windows and where a loader spends its time, run for real (CPU)."""

from __future__ import annotations

import json

import pytest

from .conftest import WORKLOADS

pytestmark = pytest.mark.integration  # every test here starts a process


def session_of(run) -> dict:
    return json.loads(next(run.out.glob("*.session.json")).read_text())


@pytest.mark.parametrize("mode", ["explicit", "optimizer", "backward", "loader", "forward"])
def test_each_shape_of_step_boundary_is_seen_and_recorded(diagnose, mode):
    run = diagnose("--interval", "0.2", str(WORKLOADS / "step_shapes.py"), mode, "3")
    assert run.returncode == 0, run.stderr
    session = session_of(run)
    assert session["steps"]["source"] == mode, (session["steps"], session["notes"])
    assert session["steps"]["count"] > 20
    assert run.report["summary"]["step_source"] == mode
    # a CPU-only run gets a CPU window from its steps, and the hotspot table from it
    assert session["profile"] is not None and session["profile"]["step_source"] == mode
    assert run.report["evidence"]["hotspots"][0]["cpu_ops"]


def test_a_run_that_ends_inside_its_window_keeps_it(diagnose):
    # a 1 s loop of 0.3 ms steps, traced to its end: thousands of steps (with Python stacks, 3 s of
    # them exceeded even the limit for gpudoctor's own traces; its counted step now predicts such a
    # stop, and the window records operators only)
    run = diagnose("--interval", "0.2", "--profile-steps", "1000000", str(WORKLOADS / "step_shapes.py"),
                   "optimizer", "1")
    assert run.returncode == 0, run.stderr
    profile = session_of(run)["profile"]
    assert profile is not None and profile["steps"] > 0 and profile["top_cpu_ops"]
    assert (run.out / profile["trace_file"]).is_file()


def test_a_long_run_gets_a_window_per_phase_and_a_later_one(diagnose):
    run = diagnose("--interval", "0.2", "--profile-later", "1", str(WORKLOADS / "gpu" / "phases.py"),
                   "--device", "cpu", "--epoch-s", "3.5", "--eval-s", "3.5")
    assert run.returncode == 0, run.stderr
    session = session_of(run)
    windows = [(w["index"], w["label"], w["step_source"]) for w in session["profiles"]]
    assert windows == [(1, "start", "optimizer"), (2, "later", "optimizer"), (3, "phase", "loader")], windows
    assert "without gradients" in session["profiles"][2]["phase"]
    assert session["profile"]["index"] == 1  # the primary window stays Session.profile
    assert [h["index"] for h in run.report["evidence"]["hotspots"]] == [1, 2, 3]


def test_an_input_bound_loop_shows_where_a_worker_spends_its_time(diagnose):
    run = diagnose("--interval", "0.2", str(WORKLOADS / "loader_starved.py"), "--workers", "1", "--steps", "150")
    assert run.returncode == 0, run.stderr
    (loader,) = session_of(run)["loaders"]
    profile = loader["fetch_profile"]
    assert profile is not None and profile["batches"] == 8 and profile["worker"] == 0
    assert profile["pid"] in loader["worker_pids"]
    top = profile["functions"][0]
    assert (top["name"], top["file"]) == ("HeavyDataset.__getitem__", "tests/workloads/loader_starved.py") or \
        top["name"] == "__getitem__"
    remedy = run.finding("GD102")["remedy"]["text"]
    assert "loader_starved.py:23" in remedy and "of a batch" in remedy, remedy


def test_workers_started_inside_a_window_are_never_traced(diagnose):
    # new worker processes for every 4 batches, and a window of 12 steps: several iterators
    # start their workers while it runs. A worker forked inside a window would keep
    # torch.profiler's tracing for its whole life (issue 24); the fork closes the window first.
    # A CPU phase gets its window after 1 s or 50 steps (profile_warmup_s, ten times the warm-up
    # steps): 48 steps of 5 ms ended about then and got none in some runs; 120 always reach it
    run = diagnose("--interval", "0.2", "--profile-steps", "12", str(WORKLOADS / "gpu" / "loader_reiter.py"),
                   "--device", "cpu", "--no-persistent", "--item", "int", "--batch", "256", "--steps", "120",
                   "--warmup", "4", "--cpu-step-ms", "5")
    assert run.returncode == 0, run.stderr
    session = session_of(run)
    workers = [p for p in session["processes"] if p["role"] == "worker"]
    assert len(workers) >= 6, workers  # two per iterator
    assert not [p["pid"] for p in workers if p["profiler_inherited"]]
    assert session["profiles"] and session["profiles"][0]["steps"] < 12  # closed early, at a fork
    # GD002 names no traced worker (its chunk-rate comparison, on a loaded 2-core machine with workers
    # restarted every 4 batches, may still see noise: its own tests cover that part)
    observer = run.outcome("GD002")
    assert observer["status"] == "pass" or "traced_workers" not in run.finding("GD002")["evidence"], observer
    assert run.report["summary"]["profiler_overhead"]["traced_workers"] == []


def test_a_loop_of_python_heavy_batches_gets_windows_without_python_stacks(diagnose):
    """num_workers=0 batches of items that make 400 Python calls each (26k calls a step): each phase's counted
    warm-up step predicts a stop of seconds with stacks, so both windows record operators only and stop in a
    fraction of that (a window with stacks held this loop 10.8-12.6 s on the CPU VM)."""
    run = diagnose("--interval", "0.2", str(WORKLOADS / "python_loader_phases.py"), "--steps", "400")
    assert run.returncode == 0, run.stderr
    windows = session_of(run)["profiles"]
    assert [w["label"] for w in windows] == ["start", "phase"]
    for window in windows:
        assert window["stacks"] is False and window["counted_calls"] > 20_000
        assert window["stop_predicted_s"] >= 2.0 and window["stop_s"] < window["stop_predicted_s"] / 3
    assert run.report["summary"]["profiler_overhead"]["stackless_windows"] == 2
