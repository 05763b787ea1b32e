"""Workloads that probe gpudoctor: secrets in odd places, descriptors, leftover processes,
options in the wrong place. For each, the workload's output and exit status stay its own,
and nothing secret or foreign reaches a report or the terminal."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudoctor.agent.redact import MASK, redact_argv, redact_text
from gpudoctor.run.supervisor import RunOptions, Supervisor

from .conftest import WORKLOADS

pytestmark = pytest.mark.integration  # every test here starts a process


SECRET = "Zq7s3cr3tValue42"


def _report_files(run) -> str:
    return "".join(p.read_text(errors="replace") for p in run.out.iterdir())


def test_environment_secret_in_exception_text_is_masked(gd):
    run = gd(str(WORKLOADS / "leaks_secret.py"), env={"DB_PASSWORD": SECRET})
    assert run.returncode == 1
    run.assert_saved()
    [error] = [e for e in run.session["errors"] if e["kind"] == "exception"]
    assert f"login refused for password {MASK} at db.example" in error["message"]
    assert SECRET not in _report_files(run)
    assert SECRET not in "\n".join(run.status_lines())  # the workload's own traceback stays its own


@pytest.mark.parametrize("argv", [["--pw", SECRET], ["-p", SECRET], ["--password", SECRET], ["-pw", SECRET]])
def test_short_and_abbreviated_password_flags_are_masked(argv):
    assert SECRET not in redact_argv(["mysql", *argv, "db"])
    assert SECRET not in redact_text("ran: mysql " + " ".join(argv) + " db")


def test_uninstrumented_child_command_line_is_redacted(tmp_path):
    supervisor = Supervisor(RunOptions(command=["true"], live_status=False))
    # python -I skips PYTHONPATH: a process gpudoctor can see but not instrument
    supervisor.proc = subprocess.Popen([sys.executable, "-I", "-c", "import time; time.sleep(60)", "--password",
                                        SECRET, "-p", SECRET, "--token=" + SECRET])
    try:
        _until_execed(supervisor.proc.pid)
        supervisor.tree.scan(supervisor.proc.pid, {})
    finally:
        supervisor.proc.kill()
        supervisor.proc.wait()
        Path(supervisor.workdir).rmdir()
    [why] = supervisor.uninstrumented.values()
    assert "python -I" in why and SECRET not in why and MASK in why


def _until_execed(pid: int, timeout: float = 10.0) -> None:
    """Until the child runs its own command: scanned between fork and exec, it still shows the test's
    command line and environment (a flaky "PYTHONPATH was set without gpudoctor's agent" on CI)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if b"-I" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                return
        except OSError:
            pass
        time.sleep(0.01)


CSV = "step,loss\n0,1.000\n1,0.500\n2,0.333\n3,0.250\n4,0.200\n"


def test_agent_never_writes_into_a_file_the_workload_opened_on_its_old_descriptor(gd, tmp_path):
    out = tmp_path / "metrics.csv"
    run = gd(str(WORKLOADS / "descriptors.py"), "closerange", str(out))
    assert run.returncode == 0, run.stderr
    run.assert_saved()
    assert out.read_text() == CSV  # exactly the workload's bytes
    main = [p for p in run.session["processes"] if p["role"] == "main"]
    assert main and main[0]["exit_handlers_ran"] is True  # the agent's last events still arrived


def test_descriptors_the_workload_inherits_reach_it(tmp_path):
    import os

    from .conftest import GPUDOCTOR

    log = tmp_path / "fd.log"
    with open(log, "wb") as fh:  # as `gpudoctor diagnose w.py 3>fd.log` gives it
        proc = subprocess.run([*GPUDOCTOR, "diagnose", "--quiet", "--out", f"{tmp_path / 'reports'}/",
                               str(WORKLOADS / "descriptors.py"), "inherited", str(fh.fileno())],
                              pass_fds=(fh.fileno(),), capture_output=True, stdin=subprocess.DEVNULL, timeout=120,
                              check=False, env={k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"})
    assert proc.returncode == 0, proc.stderr
    assert log.read_bytes() == b"the workload wrote this\n"


def test_agent_writer_reopens_its_file_when_the_workload_closed_its_descriptor(tmp_path):
    import json
    import os

    from gpudoctor.agent.events import EventWriter

    writer = EventWriter(str(tmp_path))
    writer.emit_now("hello", n=1)
    os.close(writer._fd)  # the workload closed it (os.closerange) and nothing took the number
    writer.emit_now("later", n=2)
    [path] = tmp_path.glob("events-*.jsonl")
    assert [json.loads(line)["k"] for line in path.read_text().splitlines()] == ["hello", "later"]
    assert writer.write_errors == 0
    writer.close()


ENDLESS = Path(__file__).resolve().parent.parent / "workloads" / "endless.py"


def test_a_stop_gpudoctor_asked_for_does_not_look_like_a_crash(gd):
    run = gd("--steps", "5", str(ENDLESS), timeout=180)
    assert run.returncode == 0, run.stderr  # stopped by gpudoctor: success (documented)
    run.assert_saved()
    assert "stopped after" in run.stdout  # the workload's own KeyboardInterrupt handler still ran
    workload_stderr = [line for line in run.stderr.splitlines() if not line.startswith("gpudoctor:")]
    assert not any("Traceback" in line or "KeyboardInterrupt" in line for line in workload_stderr), run.stderr
    assert run.report["stop_reason"] == "steps" and run.report["exit_code"] == 130  # killed by SIGINT, as before


def test_the_users_own_interrupt_keeps_its_traceback(gd_started):
    import signal

    started = gd_started(str(WORKLOADS / "loader.py"), "hang")
    started.wait_for_line("hanging after 8 steps")
    started.proc.send_signal(signal.SIGINT)  # like Ctrl-C: the user's interrupt, shown as usual
    run = started.finish(timeout=180)
    assert run.returncode == 130
    assert "Traceback" in run.stderr and "KeyboardInterrupt" in run.stderr


def test_gpudoctor_options_after_the_script_are_a_usage_error_when_the_script_rejects_them(gd):
    run = gd(str(WORKLOADS / "takes_args.py"), "--lr", "0.5", "--duration", "10")
    assert run.returncode == 64, run.stderr
    [line] = run.status_lines()
    assert line.startswith("gpudoctor: error: the script rejected its arguments")
    assert f"gpudoctor diagnose --duration 10 {WORKLOADS / 'takes_args.py'} --lr 0.5" in line
    assert "unrecognized arguments: --duration 10" in run.stderr  # the script's own message, untouched
    assert not run.out.exists() or not list(run.out.iterdir())  # no "run failed" report


def test_an_option_the_script_accepts_stays_the_scripts(gd):
    # --steps is the script's own option here: it ran fine, gpudoctor only notes where its options go
    run = gd(str(WORKLOADS / "takes_args.py"), "--steps", "3")
    assert run.returncode == 0, run.stderr
    run.assert_saved()
    assert "lr=0.1 steps=3" in run.stdout
    assert any("gpudoctor's options go before it" in line for line in run.status_lines())


def test_after_double_dash_the_command_is_taken_as_written(gd):
    import sys

    run = gd("--", sys.executable, str(WORKLOADS / "takes_args.py"), "--duration", "10")
    assert run.returncode == 2  # the workload's own status
    assert not any("options go before" in line for line in run.status_lines())


def test_a_process_that_outlives_the_workload_is_reported(gd):
    import os
    import re
    import signal

    run = gd(str(WORKLOADS / "orphan.py"))
    pid = int(re.search(r"helper pid (\d+)", run.stdout).group(1))
    try:
        assert run.returncode == 0, run.stderr
        run.assert_saved()
        [line] = [line for line in run.status_lines() if "still ran after it ended" in line]
        assert f"pid {pid} (" in line and "gpudoctor left them running" in line and SECRET not in line
        assert any(f"pid {pid} (" in n and "left them running" in n for n in run.session["notes"])
        os.kill(pid, 0)  # still running: gpudoctor did not kill what the user may need
    finally:
        os.kill(pid, signal.SIGKILL)


def _gone(pid: int, timeout: float = 5.0) -> bool:
    import time

    import psutil

    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def test_a_short_lived_parent_leaves_a_process_in_its_group_that_is_stopped(gd, tmp_path):
    """issue 27 item 7: what is left in the workload's process group is stopped as Ctrl-C would,
    escalated after --grace (a background job of sh ignores SIGINT: SIGTERM ends it)."""
    import os
    import signal

    # no Python, no agent, gone before any scan of the tree: found by its process group
    pidfile = tmp_path / "pid"
    run = gd("--grace", "1", "--", "sh", "-c", f"sleep 60 </dev/null >/dev/null 2>&1 & echo $! > {pidfile}")
    pid = int(pidfile.read_text())
    try:
        assert run.returncode == 0, run.stderr
        assert _gone(pid), "the process left in the workload's group still runs"
        [line] = [line for line in run.status_lines() if "process group" in line]
        assert "1 process(es) still in the workload's process group" in line and "SIGTERM" in line, line
        assert not any("still ran after it ended" in line for line in run.status_lines()), run.stderr
    finally:
        if not _gone(pid, 0):
            os.kill(pid, signal.SIGKILL)


def test_a_duration_stop_stops_the_whole_process_group_and_names_what_survives(gd, tmp_path):
    """A group member that ignores SIGINT and SIGTERM gets SIGKILL after --grace; one in a session
    of its own is not in the group: named, left running."""
    import os
    import signal

    stubborn = ("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('stubborn', flush=True); time.sleep(300)")
    script = tmp_path / "group.py"
    script.write_text(
        "import subprocess, sys, time\n"
        f"a = subprocess.Popen([sys.executable, '-c', {stubborn!r}], stdout=subprocess.PIPE, "
        "stderr=subprocess.DEVNULL)\n"
        "a.stdout.readline()\n"
        "b = subprocess.Popen(['sleep', '300'], start_new_session=True, stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL)\n"
        "print(f'pids {a.pid} {b.pid}', flush=True)\n"
        "time.sleep(300)\n")
    run = gd("--duration", "4", "--grace", "1", str(script))
    stubborn_pid, away_pid = (int(p) for p in run.stdout.split("pids ", 1)[1].split()[:2])
    try:
        assert run.returncode == 0, run.stderr
        assert _gone(stubborn_pid), "a group member that ignores SIGINT and SIGTERM still runs"
        assert not _gone(away_pid, 0)  # a session of its own: not the workload's group
        [stopped] = [line for line in run.status_lines() if "process group" in line]
        assert "SIGKILL" in stopped, stopped
        [left] = [line for line in run.status_lines() if "still ran after it ended" in line]
        assert f"pid {away_pid} (sleep 300)" in left and str(stubborn_pid) not in left
    finally:
        for pid in (stubborn_pid, away_pid):
            if not _gone(pid, 0):
                os.kill(pid, signal.SIGKILL)
