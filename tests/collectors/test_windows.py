"""The agent's window events into Session.profiles: summaries, labels, phases, the primary window."""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers import make_steps

from gpudoctor.collectors.windows import apply_windows, phase_words
from gpudoctor.run.assemble import replay_window
from gpudoctor.session import Session

WINDOWS = Path(__file__).resolve().parent.parent / "fixtures" / "h200" / "windows"


def event(index, path, source, label, t_start, **fields):
    return {"pid": 7, "index": index, "path": path, "source": source, "label": label, "steps": 10,
            "t_start": t_start, "t_end": t_start + 0.5, **fields}


def test_every_window_is_summarised_and_the_first_stepped_one_is_primary(tmp_path):
    for name in ("item_sync", "tiny_kernels", "small_batch"):
        shutil.copy(WINDOWS / f"{name}.trace.json.gz", tmp_path / f"{name}.json")
    events = [
        event(1, "item_sync.json", "time", "start", 103.0, steps=0),
        event(2, "tiny_kernels.json", "optimizer", "phase", 110.0, loader="7:0", grad=True, cuda=True, stacks=True,
              stop_s=2.5),
        event(3, "small_batch.json", "loader", "phase", 130.0, loader="7:1", grad=False, cuda=True, stacks=False,
              stop_s=0.08, counted={"t_start": 129.5, "duration_s": 0.4, "calls": 390000, "stop_predicted_s": 7.02}),
        {"pid": 7, "error": "profiler failed to stop/export: boom"},
    ]
    session = Session(cwd="/nowhere")
    primary = apply_windows(events, tmp_path, session, t0=100.0, replay=replay_window)
    # what the agent timed of each stop, and whether a window recorded Python stacks (not known: None)
    assert [(p.stacks, p.stop_s) for p in session.profiles] == [(None, None), (True, 2.5), (False, 0.08)]
    # the step counted before the third (its phase's Python calls predicted a long stop with stacks)
    assert [(p.counted_start_s, p.counted_calls, p.stop_predicted_s) for p in session.profiles] == [
        (None, None, None), (None, None, None), (29.5, 390000, 7.02)]
    assert primary == "tiny_kernels.json"
    assert [(p.index, p.label, p.step_source) for p in session.profiles] == [
        (1, "start", "time"), (2, "phase", "optimizer"), (3, "phase", "loader")]
    assert session.profile is session.profiles[1]
    assert session.windows()[0] is session.profile and len(session.windows()) == 3
    third = session.profiles[2]
    assert third.phase == "DataLoader batches, DataLoader 7:1, without gradients, on CUDA"
    assert (third.window_start_s, third.window_end_s) == (30.0, 30.5)
    assert all(p.replay is not None for p in session.profiles)
    assert "profile" not in session.unavailable


def _evaluation_then_training(directory, evaluation, training):
    """A run of optimizer steps whose first window counted forwards without gradients (an evaluation),
    its second the training steps: the Session and the primary window's trace file."""
    events = [
        event(1, evaluation, "forward", "start", 103.0, grad=False, cuda=True),
        event(2, training, "optimizer", "phase", 110.0, grad=True, cuda=True),
    ]
    session = Session(cwd="/nowhere")
    session.steps.source = "optimizer"
    session.steps.records = make_steps(60, 0.01, start_t=5.0)
    return session, apply_windows(events, directory, session, t0=100.0, replay=replay_window)


def test_the_window_of_the_runs_own_steps_is_primary_over_an_earlier_one_of_another_source(tmp_path):
    """nanoGPT's train.py evaluates before it trains: the first window counted module forwards under
    no_grad (with every library's first call in it), the run counts optimizer steps. The primary window,
    whose replay is calibrated to the run's steady steps and whose trace is kept, is the training one;
    the evaluation window stays, its replay not calibrated (its steps are not the run's)."""
    for name in ("item_sync", "tiny_kernels"):
        shutil.copy(WINDOWS / f"{name}.trace.json.gz", tmp_path / f"{name}.json")
    session, primary = _evaluation_then_training(tmp_path, "item_sync.json", "tiny_kernels.json")
    assert primary == "tiny_kernels.json"
    assert session.profile is session.profiles[1] and session.windows()[0] is session.profile
    first, training = session.profiles
    assert training.replay is not None and training.replay.calibration.startswith("host costs scaled by")
    assert first.replay is not None and first.replay.calibration.startswith("not calibrated")


def test_a_stand_in_for_an_unreadable_primary_window_is_replayed_calibrated_to_the_run(tmp_path):
    """The run's own window (optimizer steps) cannot be read: the evaluation window before it stands
    in as primary, and its replay is then calibrated to the run's steady steps as the primary one's is
    (it had been replayed as a window of another source, not calibrated)."""
    shutil.copy(WINDOWS / "tiny_kernels.trace.json.gz", tmp_path / "eval.json")
    (tmp_path / "train.json").write_bytes(b"{not a trace")
    session, primary = _evaluation_then_training(tmp_path, "eval.json", "train.json")
    assert primary == "eval.json"
    assert session.profiles == [session.profile]
    assert session.profile.replay is not None
    assert "host costs scaled by" in session.profile.replay.calibration, session.profile.replay.calibration
    assert any("profiler window 2" in note for note in session.notes)


def test_without_a_window_of_the_runs_steps_the_first_stepped_one_is_primary(tmp_path):
    shutil.copy(WINDOWS / "item_sync.trace.json.gz", tmp_path / "a.json")
    shutil.copy(WINDOWS / "tiny_kernels.trace.json.gz", tmp_path / "b.json")
    events = [event(1, "a.json", "time", "start", 103.0, steps=0), event(2, "b.json", "forward", "phase", 110.0)]
    session = Session(cwd="/nowhere")
    session.steps.source = "optimizer"
    assert apply_windows(events, tmp_path, session, t0=100.0) == "b.json"
    assert session.profile is session.profiles[1]


def test_no_window_says_why():
    session = Session(torch_cuda_used=True)
    session.unavailable["steps"] = "no step boundaries seen"
    assert apply_windows([], Path("."), session, 0.0) is None
    assert "time-bounded window" in session.unavailable["profile"]


def test_phase_words_of_a_stepless_window():
    assert phase_words({"source": "time"}) == "no step boundaries (time-bounded)"


def test_a_missing_dependency_is_named_with_its_fix(tmp_path, monkeypatch):
    """Issue 27, item 18: without msgspec every trace check said "not available in this build"."""
    import sys

    for name in [m for m in sys.modules if m.startswith(("gpudoctor.collectors.trace", "gpudoctor.replay"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "msgspec", None)  # import msgspec -> ModuleNotFoundError
    shutil.copy(WINDOWS / "tiny_kernels.trace.json.gz", tmp_path / "w.json")
    session = Session(cwd="/nowhere")
    assert apply_windows([event(1, "w.json", "optimizer", "start", 1.0)], tmp_path, session, t0=0.0,
                         replay=replay_window) is None
    reason = session.unavailable["profile"]
    assert "msgspec" in reason and "pip install msgspec" in reason


def test_analyze_without_a_dependency_says_which_in_one_line(tmp_path, monkeypatch, capsys):
    """Issue 27, item 18: `analyze` without msgspec was an "internal error" (exit 70)."""
    import sys

    from gpudoctor.base import exitcodes
    from gpudoctor.cli import main

    for name in [m for m in sys.modules if m.startswith(("gpudoctor.collectors.trace", "gpudoctor.commands.analyze"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "msgspec", None)
    code = main(["analyze", str(WINDOWS / "tiny_kernels.trace.json.gz"), "--out", f"{tmp_path}/"])
    err = capsys.readouterr().err
    assert code == exitcodes.NOT_RUNNABLE, err
    assert err.strip().splitlines() == [
        ("gpudoctor: error: this command needs the Python package msgspec, which is not installed here: "
         "pip install msgspec (or reinstall gpudoctor with its dependencies)")]


def test_a_counted_step_this_version_cannot_read_is_left_alone():
    from gpudoctor.collectors.windows import counted_step

    assert counted_step({"counted": {"t_start": 1.0, "duration_s": 0.1, "calls": 5, "stop_predicted_s": 0.1}},
                        0.5) == (0.5, 0.1, 5, 0.1)
    for bad in ("x", {"t_start": 1.0}, {"t_start": "a", "duration_s": 0.1, "calls": 5, "stop_predicted_s": 0.1},
                {"t_start": 1.0, "duration_s": float("nan"), "calls": 5, "stop_predicted_s": 0.1},
                {"t_start": 1.0, "duration_s": 0.1, "calls": -5, "stop_predicted_s": 0.1}):
        assert counted_step({"counted": bad}, 0.0) is None
