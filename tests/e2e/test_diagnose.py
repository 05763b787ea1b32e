"""End to end: `gpudoctor diagnose` on real (small, CPU) workloads with known answers."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from .conftest import WORKLOADS

pytestmark = pytest.mark.integration  # every test here starts a process



def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr


def test_starved_loader_ranks_input_stall_first(diagnose):
    run = diagnose(str(WORKLOADS / "loader_starved.py"), "--steps", "120")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "trained 120 steps"  # the workload's own stdout, untouched
    report = run.report
    assert report["schema"] == "gpudoctor.report/1"
    findings = report["findings"]
    # the input stage leads: the stall (GD102) or its cause here, the main thread producing the
    # batches (GD103); the two predict the same change, and the larger gain goes first (issue 25)
    assert findings[0]["id"] in ("GD102", "GD103") and findings[0]["stage"] == 1, [f["id"] for f in findings]
    assert report["summary"]["verdict"].startswith("Input-bound"), report["summary"]["verdict"]
    stall = run.finding("GD102")
    assert stall["evidence"]["stall_kind"]["value"] == "cpu-bound"
    assert report["summary"]["data_wait_share"] > 0.5
    workers = run.finding("GD101")
    if report["summary"]["usable_cores"] >= 3:
        # a worker per spare core produces batches in parallel with the loop: GD101 names how many
        assert workers is not None
        match = re.search(r"num_workers=(\d+)", workers["remedy"]["code"])
        assert match and int(match.group(1)) >= 2
    elif workers is None:
        # one spare core carries one worker, which mostly moves the same work out of the loop and adds
        # its hand-off: when the measured gain is that small, no advice to add it; the remedy is cheaper batches
        assert "more workers would not help" in stall["remedy"]["text"]
    else:
        # or the one worker the spare core allows pays (the loop's own work overlaps the batches): then
        # GD101 sizes it, and there is one piece of advice on the workers (issue 26)
        assert workers["severity"] != "critical"
        assert re.search(r"num_workers=1\b", workers["remedy"]["code"]), workers["remedy"]
        assert "more workers would not help" not in stall["remedy"]["text"]
    html = next(run.out.glob("*.html")).read_text()
    assert "GD102" in html and "<svg" in html


def test_waiting_loader_is_classified_as_waiting(diagnose):
    run = diagnose(str(WORKLOADS / "loader_waiting.py"))
    assert run.returncode == 0, run.stderr
    stall = run.finding("GD102")
    assert stall is not None
    assert stall["evidence"]["stall_kind"]["value"] == "waiting"
    assert run.finding("GD103") is None  # idle CPUs are not CPU saturation


def test_more_workers_fix_a_waiting_loader(diagnose, tmp_path):
    slow = diagnose(str(WORKLOADS / "loader_waiting.py"), "--workers", "1").report["summary"]
    shutil.rmtree(tmp_path / "reports")
    fast = diagnose(str(WORKLOADS / "loader_waiting.py"), "--workers", "6").report["summary"]
    # workers that sleep on I/O overlap even on 2 cores: several times the steps per second
    assert fast["steps_per_s"] > 2.5 * slow["steps_per_s"], (slow, fast)
    assert fast["data_wait_share"] < slow["data_wait_share"], (slow, fast)


def test_compute_bound_loop_has_no_data_findings(diagnose):
    run = diagnose(str(WORKLOADS / "compute_bound.py"))
    assert run.returncode == 0, run.stderr
    assert not [f for f in run.report["findings"] if f["stage"] == 1]
    for check_id in ("GD101", "GD102"):
        outcome = run.outcome(check_id)
        assert outcome["status"] == "skipped"
        assert "DataLoader" in outcome["reason"]
    assert run.report["summary"]["steps"] >= 60


def test_exit_code_is_the_workloads_and_report_is_written(diagnose):
    run = diagnose(str(WORKLOADS / "exit_code.py"))
    assert run.returncode == 3
    assert run.report["exit_code"] == 3
    assert run.finding("GD001")["severity"] == "warning"
    assert len(list(run.out.glob("*.html"))) == 1


def test_crash_shows_traceback_and_is_recorded(diagnose):
    run = diagnose(str(WORKLOADS / "raises.py"))
    assert run.returncode == 1
    assert "ValueError: diverged at step 9" in run.stderr  # the workload's traceback, as usual
    report = run.report
    assert report["findings"][0]["id"] == "GD001"
    errors = report["evidence"]["errors"]
    assert errors and errors[0]["type"] == "ValueError"
    assert "raises.py" in errors[0]["traceback"]
    assert report["summary"]["crashed"] is True


def test_module_form(diagnose):
    run = diagnose("-m", "compute_bound", cwd=WORKLOADS)
    assert run.returncode == 0, run.stderr
    assert run.report["command"][1:3] == ["-m", "compute_bound"]


def test_torchrun_form_instruments_the_worker_process(diagnose):
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun not installed next to this interpreter")
    run = diagnose("--", str(torchrun), "--nproc-per-node", "1", str(WORKLOADS / "compute_bound.py"))
    assert run.returncode == 0, run.stderr
    assert run.report["summary"]["steps"] >= 60  # seen in the grandchild, the training process


def test_steps_stops_the_run_gracefully(diagnose):
    run = diagnose("--steps", "30", str(WORKLOADS / "endless.py"))
    assert run.returncode == 0, run.stderr  # gpudoctor asked it to stop: documented as success
    report = run.report
    assert report["stop_reason"] == "steps"
    assert report["summary"]["steps"] >= 30
    assert "stopped after" in run.stdout


def test_duration_stops_the_run(diagnose):
    run = diagnose("--duration", "4", str(WORKLOADS / "endless.py"))
    assert run.returncode == 0, run.stderr
    assert run.report["stop_reason"] == "duration"  # the workload is endless: only the duration ended it
    assert run.report["duration_s"] >= 4


@pytest.mark.parametrize(
    "args, code, text",
    [
        (["missing_script.py"], 66, "no such file"),
        ([str(WORKLOADS)], 69, "is a directory"),
        ([str(WORKLOADS / "__init__.txt")], 69, "not a Python script"),
        (["--", "no-such-command-gpudoctor"], 66, "command not found"),
        (["--bogus", "x.py"], 64, "unrecognized"),
        (["--duration", "-3", "x.py"], 64, "positive"),
        ([], 64, "what should I run"),
    ],
)
def test_bad_input_one_line_error(diagnose, tmp_path, args, code, text):
    notes = WORKLOADS / "__init__.txt"
    run = diagnose(*args)
    assert run.returncode == code, run.stderr
    _no_traceback(run.stderr)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and text in lines[0], run.stderr
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())
    assert notes.exists()


def test_unwritable_output_dir_fails_before_running(tmp_path):
    import subprocess

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "diagnose", "--out", f"{blocker}/sub/", str(WORKLOADS / "exit_code.py")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 73
    _no_traceback(proc.stderr)
    assert "exiting with 3" not in proc.stdout  # refused before the workload started
    assert blocker.read_text() == "not a directory"


def test_existing_report_is_never_overwritten(tmp_path):
    import subprocess

    target = tmp_path / "mine.html"
    target.write_text("my precious report")
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "diagnose", "--out", str(target), str(WORKLOADS / "exit_code.py")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 74
    _no_traceback(proc.stderr)
    assert target.read_text() == "my precious report"


def test_fail_on_turns_findings_into_exit_3(diagnose):
    run = diagnose("--fail-on", "warning", "--format", "junit", str(WORKLOADS / "loader_waiting.py"))
    assert run.returncode == 3, run.stderr
    assert run.finding("GD102")["severity"] in ("warning", "critical")
    junit = next(run.out.glob("*.xml")).read_text()
    assert "GD102" in junit and "<failure" in junit


def test_ignore_silences_a_check(diagnose):
    run = diagnose("--ignore", "input-stall,GD101", str(WORKLOADS / "loader_waiting.py"))
    assert run.returncode == 0, run.stderr
    assert run.finding("GD102") is None and run.finding("GD101") is None
    assert run.outcome("GD102")["reason"].startswith("ignored")


def test_a_run_without_step_boundaries_gets_a_time_bounded_profiler_window(diagnose):
    run = diagnose("--interval", "0.2", "--stepless-after", "1", "--stepless-window", "1",
                   str(WORKLOADS / "stepless_infer.py"), "8", "--fake-cuda", "--no-module")
    assert run.returncode == 0, run.stderr
    assert "inferences" in run.stdout
    [session_path] = run.out.glob("*.session.json")
    session = json.loads(session_path.read_text())
    assert session["steps"]["source"] is None  # no module, loader, optimizer or backward: no steps
    profile = session["profile"]
    assert profile is not None, session["unavailable"]
    assert profile["step_source"] == "time" and profile["label"] == "start"
    length = profile["window_end_s"] - profile["window_start_s"]
    # opened at a tensor copy >= 1 s after "CUDA" started (starting Kineto takes seconds on a small CPU
    # box, more under load), closed at the first copy 1 s later, before the loop ends: the window holds
    # only some of the loop's matmuls (counts, not durations: a loaded machine runs the same loop slower)
    assert length >= 0.9, profile
    assert profile["window_start_s"] >= 1.0
    inferences = int(re.search(r"inferences (\d+)", run.stdout).group(1))
    profiled = next(op["count"] for op in profile["top_ops"] if op["name"] == "aten::mm")
    assert 0 < profiled < inferences, (profiled, inferences)
    assert (run.out / profile["trace_file"]).is_file()
    assert profile["call_sites"] and "stepless_infer.py" in profile["call_sites"][0]["site"]


def test_an_inference_loop_with_a_module_gets_a_window_from_its_forwards(diagnose):
    run = diagnose("--interval", "0.2", str(WORKLOADS / "stepless_infer.py"), "5")
    assert run.returncode == 0, run.stderr
    session = json.loads(next(run.out.glob("*.session.json")).read_text())
    assert session["steps"]["source"] == "forward"
    profile = session["profile"]
    assert profile is not None and profile["step_source"] == "forward", session["unavailable"]
    # early in the loop, not at its end: forwards ran after the window closed (an ordering,
    # not a time: a loaded machine starts the loop later and the window with it; the workload
    # runs a fixed count of forwards of at least 20 ms each, never fewer under load)
    assert profile["window_end_s"] < session["steps"]["last_step_t"], (profile, session["steps"]["last_step_t"])
    assert profile["top_cpu_ops"] and profile["top_cpu_ops"][0]["name"].startswith("aten::")
    hotspots = run.report["evidence"]["hotspots"]
    assert hotspots and hotspots[0]["cpu_ops"] and "Hotspots (profiled window 1" in run.stderr


def test_no_time_bounded_window_under_torch_compile(diagnose):
    run = diagnose("--interval", "0.2", "--stepless-after", "1", "--stepless-window", "1",
                   str(WORKLOADS / "stepless_infer.py"), "4", "--fake-cuda", "--compile")
    assert run.returncode == 0, run.stderr
    assert "inferences" in run.stdout  # torch.compile, wrapped by the agent, still compiled and ran
    [session_path] = run.out.glob("*.session.json")
    session = json.loads(session_path.read_text())
    assert session["profile"] is None
    assert "torch.compile" in session["unavailable"]["profile"]


def test_in_memory_tensor_dataset_is_not_told_to_add_workers(diagnose):
    # items that are already tensors cost the loop less to produce than to receive from a worker
    run = diagnose(str(WORKLOADS / "tensor_dataset.py"), "--steps", "300")
    assert run.returncode == 0, run.stderr
    workers = run.finding("GD101")
    if workers is not None:
        # measured on a loaded 2-core machine (the other test worker's run beside it) the loop's own batch
        # cost can come out above a worker's hand-off: never more than a warning, and then one advice on
        # the workers (issue 26). Alone, the run gets no GD101 (3 of 3 runs).
        assert workers["severity"] != "critical", workers
        stall = run.finding("GD102")
        assert stall is None or "Workers would not help" not in stall["remedy"]["text"]
        return
    stall = run.finding("GD102")
    if stall is not None:  # the loop does wait for its batches; the remedy is cheaper batches
        # either the hand-off bound ("Workers would not help here: ...", with batched indexing) or a worker plan
        # that found no count worth it ("more workers would not help (...)"): which one depends on timings
        # measured on a shared machine; neither may advise adding workers
        assert "workers would not help" in stall["remedy"]["text"].lower()
        code = stall["remedy"]["code"] or ""
        assert "num_workers=" not in code
    saturated = run.finding("GD103")
    assert saturated is None or "GPU" not in saturated["title"]  # a CPU-only run gets no GPU wording


def test_a_duration_stop_inside_a_dataloader_iteration_is_a_stop(diagnose):
    """issue 27 item 6: the SIGINT lands in DataLoader workers and the loop alike."""
    run = diagnose("--duration", "6", str(WORKLOADS / "loader_forever.py"), timeout=120)
    assert run.returncode == 0, run.stderr
    report = run.report
    assert report["stop_reason"] == "duration"
    assert run.finding("GD001") is None, run.finding("GD001")
