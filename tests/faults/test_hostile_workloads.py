"""Workloads that probe gpudoctor: secrets in odd places, descriptors, leftover processes,
options in the wrong place. For each, the workload's output and exit status stay its own,
and nothing secret or foreign reaches a report or the terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.agent.redact import MASK, redact_argv, redact_text
from gpudoctor.supervisor import RunOptions, Supervisor

from .conftest import WORKLOADS

pytestmark = pytest.mark.slow

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
        supervisor._find_uninstrumented()
    finally:
        supervisor.proc.kill()
        supervisor.proc.wait()
        Path(supervisor.workdir).rmdir()
    [why] = supervisor.uninstrumented.values()
    assert "python -I" in why and SECRET not in why and MASK in why
