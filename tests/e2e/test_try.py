"""End to end: `gpudoctor diagnose --try` re-runs the workload with each remedy and measures it."""

from __future__ import annotations

import json

import pytest

from gpudoctor.trials.report import times

from .conftest import WORKLOADS

pytestmark = pytest.mark.integration  # every test here starts a process


PROBE = str(WORKLOADS / "overrides_probe.py")


def probe_lines(stdout: str) -> list[dict]:
    return [json.loads(line.removeprefix("PROBE ")) for line in stdout.splitlines() if line.startswith("PROBE ")]


def test_try_measures_the_worker_count_gd101_computed(diagnose):
    # 480 steps: the trial's workers (prefetch_factor 4) hold up to 4 batches each, and a trial is
    # compared only over enough steady steps to drain that queue three times (trials/trust.py): 192
    # for the 16 workers GD101 asks for on 2 cores, after the warm-up and the trial's own profiler
    # window (about 140 steps of 16 fast workers, with the steps after it); 320 left 174 of them
    run = diagnose("--try", str(WORKLOADS / "loader_waiting.py"), "--steps", "480")
    assert run.returncode == 0, run.stderr
    assert "--duration 60" in run.stderr  # no bound given: the default one, said so
    assert run.stdout.count("trained 480 steps") == 2, run.stderr  # the diagnosed run, then the trial
    report = run.report
    assert report["overrides"] is None  # the diagnosed run itself was not altered
    [trial] = report["trials"]
    recommended = run.finding("GD101")["evidence"]["recommended_workers"]["value"]
    assert trial["name"] == "workers" and trial["finding"] == "GD101"
    assert trial["override"]["loader"]["num_workers"] == recommended
    assert {a["name"] for a in trial["applied"]} >= {"num_workers"}
    assert trial["status"] == "measured" and not trial["numerics_change"]
    assert min(trial["steady_steps"]) >= 10
    # workers that sleep on I/O overlap even on 2 cores: several times the steps per second
    assert trial["measured_gain"] > 2.5, trial
    line = run.finding("GD101")["trial"]["text"]
    assert line.startswith("predicted ") and f"measured {times(trial['measured_gain'])}" in line
    assert f"with num_workers={recommended}" in line
    trial_report = json.loads((run.out / trial["report"]).read_text())
    assert trial_report["overrides"]["requested"] == trial["override"]
    assert "Remedies tried" in run.stderr


def test_without_try_the_workload_runs_as_written(diagnose):
    run = diagnose(PROBE)
    assert run.returncode == 0, run.stderr
    [seen] = probe_lines(run.stdout)
    assert seen["num_workers"] == 0 and seen["allow_tf32"] is False and seen["cudnn_benchmark"] is False
    assert seen["alloc_conf"] is None and seen["model_compiled"] is False
    assert run.report["overrides"] is None and run.report["trials"] is None
    assert not list(run.out.glob("*.trials"))


def test_each_override_reaches_the_workload_in_its_own_trial_only(diagnose):
    only = "workers=2,pin_memory,persistent_workers,prefetch=3,tf32,cudnn_benchmark,expandable_segments,compile=eager"
    # nine runs of the workload in all: on a loaded 2-core machine they took over 180 s
    run = diagnose("--try-only", only, "--steps", "12", PROBE, env={"PYTORCH_CUDA_ALLOC_CONF": ""}, timeout=420)
    assert run.returncode == 0, run.stderr
    own, *trials = probe_lines(run.stdout)
    assert own["num_workers"] == 0 and own["allow_tf32"] is False and own["model_compiled"] is False
    report = run.report
    names = [t["name"] for t in report["trials"]]
    assert names == ["workers", "pin_memory", "persistent_workers", "prefetch", "tf32", "cudnn_benchmark",
                     "expandable_segments", "compile"]
    seen = dict(zip(names, trials))
    changed = {name: {k: v for k, v in s.items() if v != own[k]} for name, s in seen.items()}
    # the workers remedy keeps them alive across epochs too; prefetch_factor is then DataLoader's default
    assert changed["workers"] == {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 2}
    assert changed["pin_memory"] == {"pin_memory": True}
    assert changed["persistent_workers"] == {} and changed["prefetch"] == {}  # they need workers: not applied
    assert changed["tf32"] == {"allow_tf32": True, "float32_matmul_precision": "high"}
    assert changed["cudnn_benchmark"] == {"cudnn_benchmark": True}
    assert changed["expandable_segments"] == {"alloc_conf": "expandable_segments:True"}
    assert changed["compile"] == {"model_compiled": True, "graphs_compiled": seen["compile"]["graphs_compiled"]}
    assert seen["compile"]["graphs_compiled"] >= 1
    numerics = {t["name"]: t["numerics_change"] for t in report["trials"]}
    assert numerics == {n: n in ("tf32", "compile") for n in names}
    persistent = report["trials"][2]
    assert persistent["applied"][0]["applied"] is False and "num_workers > 0" in persistent["applied"][0]["note"]
    assert "never saw" in persistent["why"]
    assert all(t["report"] and (run.out / t["report"]).is_file() for t in report["trials"])


# issue 27 item 1: the trials leave the user's files exactly as the diagnosed run left them

def _project(tmp_path):
    import shutil

    work = tmp_path / "project"
    (work / "inputs").mkdir(parents=True)
    (work / "inputs" / "data.txt").write_text("input-42\n")
    (work / "history.log").write_text("an earlier run\n")
    shutil.copy(WORKLOADS / "writes_files.py", work / "train.py")
    return work


def _files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "gpudoctor-reports" not in p.parts}


def test_trials_run_in_a_scratch_directory_and_leave_the_users_files_alone(diagnose, tmp_path):
    work = _project(tmp_path)
    run = diagnose("--try-only", "workers=2,tf32", "--steps", "100", "train.py", cwd=work)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("trained 30 steps") == 3, run.stdout  # the diagnosed run and two trials
    # each trial read the input and wrote its checkpoint and log line, in its scratch directory
    assert "each trial runs in a scratch copy of" in run.stderr and "with no stdin" in run.stderr
    history = (work / "history.log").read_text().splitlines()
    assert len(history) == 2 and history[1].endswith("read input-42"), history  # one line: the plain run's
    report = run.report
    assert [t["status"] for t in report["trials"]] == ["measured", "measured"], report["trials"]


def test_the_files_are_exactly_what_the_plain_run_left(diagnose, tmp_path):
    work = _project(tmp_path)
    plain = diagnose("--steps", "100", "train.py", cwd=work)
    assert plain.returncode == 0, plain.stderr
    left = _files(work)
    tried = diagnose("--try-only", "tf32", "--steps", "100", "train.py", cwd=work)
    assert tried.returncode == 0, tried.stderr
    now = _files(work)
    # the second diagnosed run wrote its own ckpt.pt and log line; the trial after it wrote none
    assert set(now) == set(left) and now["history.log"].count(b"\n") == left["history.log"].count(b"\n") + 1


def test_a_write_outside_the_working_directory_refuses_the_trials(diagnose, tmp_path):
    work = _project(tmp_path)
    elsewhere = tmp_path / "elsewhere" / "out.txt"
    elsewhere.parent.mkdir()
    home = tmp_path / "home"
    (tmp_path / "tmp").mkdir()  # the temporary directory is elsewhere: that write is not a temporary file
    run = diagnose("--try-only", "tf32", "--steps", "100", "train.py", cwd=work,
                   env={"WRITE_TO": str(elsewhere), "TMPDIR": str(tmp_path / "tmp"), "HOME": str(home)})
    assert run.returncode == 76, run.stderr
    [line] = [line for line in run.stderr.splitlines() if "--try refused" in line]
    assert str(elsewhere) in line and "--try-in-place" in line
    assert run.stdout.count("trained 30 steps") == 1  # no trial ran
    assert run.report["trials"] is None and any("--try refused" in n for n in run.report["evidence"]["notes"])
    opted = diagnose("--try-only", "tf32", "--steps", "100", "--try-in-place", "train.py", cwd=work,
                     env={"WRITE_TO": str(elsewhere)})
    assert opted.returncode == 0, opted.stderr
    assert opted.stdout.count("trained 30 steps") == 2 and "--try-in-place: the trials run in your" in opted.stderr


def test_a_trial_may_not_write_beside_the_script_through_an_absolute_path(diagnose, tmp_path):
    """The plain run wrote beside the script (its working directory) by an absolute path: a
    trial's same write is refused by its agent, and the file stays the plain run's."""
    work = _project(tmp_path)
    run = diagnose("--try-only", "tf32", "--steps", "100", "train.py", cwd=work, env={"WRITE_BESIDE_SCRIPT": "1"})
    written = (work / "beside.txt").read_text()
    assert run.returncode == 0, run.stderr
    [trial] = run.report["trials"]
    assert trial["status"] == "failed" and "PermissionError" in trial["why"], trial
    assert (work / "beside.txt").read_text() == written
