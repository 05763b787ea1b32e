"""EventReader: each event kind reaches its handler; unknown or broken events are skipped."""

from __future__ import annotations

import json

from gpudoctor.collectors.events import ERRORS_MAX, EventReader
from gpudoctor.session import Session


def read(tmp_path, pid: int, lines: list[dict | str]) -> EventReader:
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    (tmp_path / f"events-{pid}.jsonl").write_text(text + "\n")
    reader = EventReader(tmp_path, 100.0)
    reader.poll()
    return reader


def test_a_run_of_every_kind_lands_in_the_session(tmp_path):
    steps = [{"k": "step", "src": "optimizer", "dur": 0.5, "wait": 0.25, "ts": 101.0 + i} for i in range(6)]
    reader = read(tmp_path, 7, [
        {"k": "hello", "ppid": 1, "argv": ["train.py", 3], "cuda_visible_devices": "0", "ts": 100.0},
        {"k": "torch", "version": "2.4.0", "cuda": "12.4"},
        {"k": "cuda", "devices": [{"uuid": "GPU-a"}, {"name": "no uuid"}]},
        {"k": "loader", "id": "L1", "num_workers": 2, "batch_size": 64, "pin_memory": False},
        {"k": "loader_workers", "id": "L1", "pids": [8, 9]},
        {"k": "loader_stats", "stats": {"L1": [6, 1.5, 0.5, 3, 0.12]}},
        {"k": "fetch", "stats": {"L1": [6, 2.0, 1.75]}},
        *steps,
        {"k": "steps_agg", "src": "optimizer", "n": 4, "dur": 2.0, "wait": 1.0, "ts": 110.0},
        {"k": "alloc", "allocated_bytes": 10, "ts": 101.0},
        {"k": "override", "name": "num_workers", "value": 4, "was": 0, "where": "DataLoader"},
        {"k": "exception", "type": "ValueError", "message": "boom", "traceback": "tb", "ts": 111.0},
        {"k": "agent_error", "where": "hooks", "error": "it broke"},
        {"k": "bye"},
    ])
    session = Session()
    reader.apply(session)

    [process] = [p for p in session.processes if p.pid == 7]
    assert process.argv == ["train.py", "3"] and process.ppid == 1 and process.device_uuids == ["GPU-a"]
    assert process.exit_handlers_ran is True
    assert session.environment.torch == "2.4.0" and session.environment.cuda == "12.4"
    assert session.torch_cuda_used is True
    [loader] = session.loaders
    assert (loader.batches, loader.wait_total_s, loader.fetch_batches, loader.fetch_cpu_s) == (6, 1.5, 6, 1.75)
    assert (loader.iterators, loader.iterators_s) == (3, 0.12)  # 3 epochs' iterators, their workers started
    assert session.batch_size == 64
    assert {p.pid: p.role for p in session.processes if p.pid in (8, 9)} == {8: "worker", 9: "worker"}
    assert session.steps.source == "optimizer"
    assert session.steps.count == 6 + 4 + 1 and session.steps.aggregated == 4
    assert [r.t for r in session.steps.records] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert session.steps.last_step_t == 10.0
    assert reader.data_wait_share() == 0.5
    assert [(a.t, a.label) for a in session.allocator] == [(1.0, "periodic")]
    assert [(o.name, o.value, o.pid) for o in session.overrides] == [("num_workers", 4, 7)]
    assert [(e.kind, e.type, e.message, e.t) for e in session.errors] == [("exception", "ValueError", "boom", 11.0)]
    assert session.notes == ["agent: pid 7: hooks: it broke"]


def test_unknown_kinds_and_broken_lines_are_skipped_and_counted(tmp_path):
    reader = read(tmp_path, 7, [
        {"k": "from_a_newer_agent", "x": 1},
        {"k": ["not", "a", "name"]},
        {"no kind": True},
        "{torn line",
        {"k": "step", "src": "optimizer", "dur": "slow", "wait": 0},
        {"k": "step", "src": "optimizer", "dur": 0.5, "wait": 0.0, "ts": 101.0},
    ])
    assert reader.malformed_lines == 2  # the torn line and the step without a number
    assert [r.duration_s for r in reader.processes[7].steps["optimizer"].records] == [0.5]
    assert list(reader.processes) == [7]


def test_errors_past_the_cap_are_counted_not_kept(tmp_path):
    errors = [{"k": "exception" if i % 2 else "oom", "type": "E", "message": str(i)} for i in range(ERRORS_MAX + 5)]
    reader = read(tmp_path, 7, [*errors, {"k": "oom_observed", "request_bytes": 1}])
    assert len(reader.errors) == ERRORS_MAX
    assert reader.errors_dropped == 5  # an observed OOM past the cap is neither kept nor counted
    assert [e.kind for e in reader.errors[:2]] == ["oom", "exception"]


def test_an_observed_oom_keeps_the_allocator_state(tmp_path):
    reader = read(tmp_path, 7, [{"k": "oom_observed", "request_bytes": 4096, "device_free": 1024,
                                 "allocator": {"reserved_bytes": 8}, "ts": 102.0}])
    [error] = reader.errors
    assert (error.kind, error.type, error.t) == ("oom", "torch.cuda.OutOfMemoryError", 2.0)
    assert error.message == "allocation of 4096 bytes failed (device free 1024 bytes)"
    assert [(a.label, a.t) for a in reader.allocator] == [("oom", 2.0)]


def test_steps_while_a_loader_process_was_profiled_are_left_out_of_the_step_statistics(tmp_path):
    """cProfile around a num_workers=0 loop's fetches slows the steps they are in series with:
    those steps (and the few after, like a window's) are not steady state."""
    steps = [{"k": "step", "src": "loader", "dur": 0.7 if not 5 <= i < 9 else 0.9, "wait": 0.6,
              "ts": 101.0 + 0.8 * i} for i in range(16)]
    reader = read(tmp_path, 7, [
        {"k": "hello", "ppid": 1, "argv": ["train.py"], "ts": 100.0},
        {"k": "loader", "id": "L1", "num_workers": 0, "batch_size": 256, "pin_memory": False},
        *steps,
        # the 4 profiled fetches ran in steps 5-8 (ending at 105.0-107.4)
        {"k": "fetch_profile", "batches": 4, "wall_s": 3.0, "functions": [], "loader": "L1", "worker": None,
         "t_start": 104.25, "t_end": 107.2, "complete": False},
    ])
    session = Session()
    reader.apply(session)
    [loader] = session.loaders
    assert loader.fetch_profile is not None and loader.fetch_profile.complete is False
    assert (loader.fetch_profile.t_start, loader.fetch_profile.t_end) == (4.25, 7.2)
    kept = [round(r.t, 1) for r in session.steps.records]
    assert 5.0 not in kept and 7.4 not in kept and 4.2 in kept and 9.0 in kept  # and those just after (0.5 s)
    assert all(r.duration_s == 0.7 for r in session.steps.records)
    assert session.steps.profiled_steps == 16 - len(kept) >= 4
    assert any("DataLoader's profiled batches" in note for note in session.notes)


def test_a_fetch_profile_from_an_older_agent_without_its_span_leaves_the_steps_alone(tmp_path):
    steps = [{"k": "step", "src": "loader", "dur": 0.5, "wait": 0.1, "ts": 101.0 + 0.5 * i} for i in range(8)]
    reader = read(tmp_path, 7, [
        {"k": "hello", "ppid": 1, "argv": ["train.py"], "ts": 100.0},
        {"k": "loader", "id": "L1", "num_workers": 0, "batch_size": 8},
        *steps,
        {"k": "fetch_profile", "batches": 8, "wall_s": 1.0, "functions": [], "loader": "L1", "worker": None},
    ])
    session = Session()
    reader.apply(session)
    assert len(session.steps.records) == 8 and session.steps.profiled_steps == 0
    assert session.loaders[0].fetch_profile.t_start is None and session.loaders[0].fetch_profile.complete is True


def test_a_workers_fetch_profile_leaves_the_loops_steps_alone(tmp_path):
    steps = [{"k": "step", "src": "loader", "dur": 0.5, "wait": 0.1, "ts": 101.0 + 0.5 * i} for i in range(12)]
    (tmp_path / "events-8.jsonl").write_text(json.dumps(
        {"k": "fetch_profile", "batches": 8, "wall_s": 1.0, "functions": [], "loader": None, "worker": 0,
         "t_start": 102.0, "t_end": 104.0, "complete": True}) + "\n")
    reader = read(tmp_path, 7, [
        {"k": "hello", "ppid": 1, "argv": ["train.py"], "ts": 100.0},
        {"k": "loader", "id": "L1", "num_workers": 1, "batch_size": 8},
        {"k": "loader_workers", "id": "L1", "pids": [8]},
        *steps,
    ])
    session = Session()
    reader.apply(session)
    assert len(session.steps.records) == 12 and session.steps.profiled_steps == 0


def test_the_step_counted_before_a_window_is_left_out_of_the_step_statistics(tmp_path):
    """The agent counts a phase's last warm-up step (agent/profiler.StepCount), which slows it:
    the one record holding that span's middle is left out, and its neighbours are not."""
    ends, t = [], 101.0
    for i in range(20):
        t += 0.25 if i == 9 else 0.1
        ends.append(round(t, 6))
    steps = [{"k": "step", "src": "optimizer", "dur": round(ends[i] - (ends[i - 1] if i else 101.0), 6), "wait": 0.0,
              "ts": ends[i]} for i in range(20)]
    reader = read(tmp_path, 7, [
        {"k": "hello", "ppid": 1, "argv": ["train.py"], "ts": 100.0},
        *steps,
        {"k": "profile", "source": "optimizer", "steps": 3, "t_start": ends[9] + 0.02, "t_end": ends[12],
         "label": "start", "index": 1, "stacks": False,
         "counted": {"t_start": ends[8] + 0.001, "duration_s": 0.249, "calls": 400000, "stop_predicted_s": 7.2}},
    ])
    session = Session()
    reader.apply(session)
    kept = [round(r.t, 2) for r in session.steps.records]
    assert round(ends[9] - 100.0, 2) not in kept and round(ends[8] - 100.0, 2) in kept
    assert all(r.duration_s == 0.1 for r in session.steps.records)
