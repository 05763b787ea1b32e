"""Faults of the workload. For each: gpudoctor exits with the workload's status, prints
one clear line about what happened, writes the report with what was recorded, and
shows the fault as a finding (GD001, or GD402 for CUDA out-of-memory)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import WORKLOADS

pytestmark = pytest.mark.integration  # every test here starts a process



def _torch_missing_python(tmp_path: Path) -> Path:
    """An interpreter without torch: a bare virtual environment of this Python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=60)
    return tmp_path / "bare" / "bin" / "python"


# (workload and its arguments, exit code, the line's words, GD001 severity, words of its title)
SIMPLE = [
    pytest.param(["raises.py"], 1, "crashed: RuntimeError: fault", "critical", "crashed: RuntimeError", id="exception"),
    pytest.param(["sys_exit.py", "7"], 7, "exited with code 7", "warning", "exited with code 7", id="sys.exit"),
    pytest.param(["os_exit.py", "9"], 9, "exited with code 9", "warning", "through os._exit", id="os._exit"),
    pytest.param(["sigkill.py"], 137, "killed by signal 9", "critical", "killed by SIGKILL", id="SIGKILL"),
    pytest.param(["segfault.py"], 139, "killed by signal 11", "critical", "killed by SIGSEGV", id="segfault"),
    pytest.param(["closes_stdout.py"], 4, "exited with code 4", "warning", "exited with code 4", id="closes-stdout"),
    pytest.param(["chdir.py"], 1, "crashed: RuntimeError", "critical", "crashed: RuntimeError", id="chdir"),
    pytest.param(["mp_spawn.py"], 1, "exited with code 1", "warning", "exited with code 1", id="mp-spawn-no-torch"),
]


@pytest.mark.parametrize("argv, code, line, severity, title", SIMPLE)
def test_workload_fault_is_reported_with_its_exit_code(gd, tmp_path, argv, code, line, severity, title):
    scratch = tmp_path / "tmp"  # gpudoctor's session directory goes here
    scratch.mkdir()
    run = gd(str(WORKLOADS / argv[0]), *argv[1:], cwd=tmp_path, env={"TMPDIR": str(scratch)})
    assert run.returncode == code, run.stderr
    run.assert_saved()
    [ended] = run.ended()
    assert line in ended, ended
    report = run.report
    assert report["exit_code"] == code
    finding = run.finding("GD001")
    assert finding is not None and finding["severity"] == severity and title in finding["title"], report["findings"]
    assert not list(scratch.iterdir()), "the session directory is removed after the report"
    main = [p for p in run.session["processes"] if p["role"] == "main"]
    if argv[0] == "os_exit.py":  # told apart from sys.exit: its exit handlers did not run
        assert "os._exit" in finding["message"] and main[0]["exit_handlers_ran"] is False
    if argv[0] == "sys_exit.py":
        assert main[0]["exit_handlers_ran"] is True
    if argv[0] == "closes_stdout.py":
        assert run.stdout == "before closing\n"  # nothing of gpudoctor's on the workload's stdout
    if argv[0] == "chdir.py":
        assert run.session["cwd"] == str(tmp_path)  # gpudoctor's own directory, not the workload's


def test_hang_is_a_finding(gd_started):
    # The workload says when it hangs; the stop comes HANG_MIN_S + 1 s later, however long
    # torch took to import on a loaded machine.
    started = gd_started("--duration", "600", str(WORKLOADS / "loader.py"), "hang")
    started.wait_for_line("hanging after 8 steps")
    time.sleep(6)
    started.proc.send_signal(signal.SIGINT)  # not a terminal: gpudoctor stops the workload's group
    run = started.finish()
    assert run.returncode == 130, run.stderr  # the workload's own status (KeyboardInterrupt)
    run.assert_saved()
    assert "interrupted (Ctrl-C)" in run.stderr
    assert run.report["stop_reason"] == "interrupted"
    hang = run.finding("GD001")
    assert hang is not None and "stopped making progress" in hang["title"], run.report["findings"]
    assert hang["evidence"]["stall_s"]["value"] >= 5


def test_hang_that_ignores_sigint_and_sigterm_is_killed_and_reported(gd_started):
    # stopped once the workload ignores the signals (a --duration could come before that)
    started = gd_started("--grace", "0.5", str(WORKLOADS / "hangs.py"), "stubborn")
    started.wait_for_line("hanging")
    started.proc.send_signal(signal.SIGINT)
    run = started.finish(timeout=60)
    assert run.returncode == 137, run.stderr  # the workload's status: it was killed
    run.assert_saved()
    assert "sending SIGTERM" in run.stderr and "sending SIGKILL" in run.stderr
    assert "ignored SIGINT: ended by SIGKILL" in run.stderr
    finding = run.finding("GD001")
    assert finding["severity"] == "info" and "ignored the request to stop" in finding["title"]
    assert run.report["exit_code"] == 137
    assert any("did not stop within 0.5s" in note for note in run.session["notes"])


def test_dataloader_worker_killed_like_the_oom_killer_does(gd):
    run = gd(str(WORKLOADS / "loader.py"), "worker-dies", timeout=90)
    assert run.returncode == 1, run.stderr
    run.assert_saved()
    finding = run.finding("GD001")
    # torch says it one of three ways, depending on when the worker died: "is killed by signal:
    # Killed", "exited unexpectedly", or a ConnectionResetError while a batch was handed over
    assert finding["title"].startswith("A DataLoader worker died ("), finding
    assert "out-of-memory killer" in finding["message"] and "num_workers" in finding["remedy"]["text"]
    assert run.report["summary"]["steps"] >= 2  # what happened before the fault is kept


def test_dataloader_worker_exception_names_the_original_error(gd):
    run = gd(str(WORKLOADS / "loader.py"), "worker-raises", timeout=90)
    assert run.returncode == 1, run.stderr
    run.assert_saved()
    finding = run.finding("GD001")
    assert finding["title"] == "The run crashed: OSError in a DataLoader worker"
    assert "OSError: fault: sample 24 is unreadable" in finding["message"]


def test_error_inside_backward_prints_the_workloads_traceback(gd):
    run = gd(str(WORKLOADS / "backward_raises.py"), timeout=90)
    assert run.returncode == 1, run.stderr
    run.assert_saved()  # no frame of ours: the agent wraps autograd.backward
    assert 'backward_raises.py", line' in run.stderr and "loss.backward()" in run.stderr, run.stderr
    assert "RuntimeError: fault in backward" in run.stderr
    assert run.report["summary"]["steps"] >= 4  # the steps before the fault, from backward() and step()


def test_spawn_start_method_workers_are_measured(gd):
    run = gd(str(WORKLOADS / "loader.py"), "spawn", timeout=120)
    assert run.returncode == 0, run.stderr
    run.assert_saved()
    assert "trained 16 steps" in run.stdout
    [loader] = run.session["loaders"]
    assert loader["fetch_batches"] == 16 and len(loader["worker_pids"]) == 1  # seen inside the spawned worker
    assert run.finding("GD001") is None


def test_subprocesses_failing_inside_a_successful_run(gd):
    run = gd(str(WORKLOADS / "spawns.py"))
    assert run.returncode == 0, run.stderr
    run.assert_saved()
    assert "exited with code 0" in run.stderr and "crashed" not in run.stderr
    finding = run.finding("GD001")
    assert finding["severity"] == "warning" and "the run itself succeeded" in finding["title"]
    assert "child process" in finding["message"]
    assert sum(p["role"] == "child" for p in run.session["processes"]) == 2  # both Python children seen


def test_own_sitecustomize_still_runs(gd):
    run = gd(str(WORKLOADS / "own_sitecustomize.py"), env={"PYTHONPATH": str(WORKLOADS / "usersite")})
    assert run.returncode == 0, run.stdout + run.stderr  # 12 if the user's sitecustomize was skipped
    assert "user sitecustomize: yes agent: True" in run.stdout
    run.assert_saved()
    assert run.session["processes"], "gpudoctor's agent must run too"


def test_pythonpath_set_by_the_workload_is_explained(gd):
    run = gd(str(WORKLOADS / "pythonpath.py"))
    assert run.returncode == 6, run.stderr
    run.assert_saved()
    assert any("ran without the agent" in line for line in run.status_lines()), run.stderr
    notes = " ".join(run.session["notes"])
    assert "PYTHONPATH was set without gpudoctor's agent" in notes and "time.sleep(1.2)" in notes


def test_torch_missing_in_the_workloads_interpreter(gd, tmp_path):
    python = _torch_missing_python(tmp_path)
    run = gd("--", str(python), str(WORKLOADS / "needs_torch.py"))
    assert run.returncode == 1, run.stderr
    run.assert_saved()
    finding = run.finding("GD001")
    assert "ModuleNotFoundError" in finding["title"] and "no (working) torch" in finding["remedy"]["text"]
    skipped = {c["id"]: c["reason"] for c in run.report["checks"] if c["status"] == "skipped"}
    for check_id in ("GD101", "GD102", "GD301", "GD401"):
        assert "never imported torch" in skipped[check_id], skipped


def test_host_memory_pressure_is_sampled_and_survived(gd):
    run = gd("--interval", "0.2", str(WORKLOADS / "memory.py"))
    assert run.returncode == 0, run.stderr
    run.assert_saved()
    peak = max(s["tree_rss_bytes"] or 0 for s in run.session["cpu_samples"])
    assert peak >= 250 << 20, peak


@pytest.mark.gpu
def test_cuda_out_of_memory(gd):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    run = gd(str(Path(__file__).resolve().parent.parent / "workloads" / "gpu" / "oom.py"), timeout=300)
    assert run.returncode == 1, run.stderr
    run.assert_saved()
    assert run.finding("GD402") is not None, run.report["findings"]
    assert run.finding("GD001") is None  # GD402 tells the story with the memory numbers
