"""gpudoctor at a terminal: a Ctrl-C typed there reaches the workload once (the terminal
sends it to both); a SIGINT sent to gpudoctor's pid alone is forwarded to the workload."""

from __future__ import annotations

import os
import pty
import select
import signal
import time
from pathlib import Path

import pytest

from .conftest import GPUDOCTOR, WORKLOADS

pytestmark = pytest.mark.integration  # every test here starts a process



class AtTerminal:
    """`gpudoctor diagnose --quiet ...` as the foreground job of a fresh pseudo-terminal."""

    def __init__(self, out: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
        command = [*GPUDOCTOR, "diagnose", "--quiet", "--out", f"{out}/", *args]
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: session leader, the terminal's foreground group
            try:
                os.execve(command[0], command, env)
            finally:
                os._exit(127)
        self.output = b""

    def read_until(self, text: bytes, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            assert time.monotonic() < deadline, self.output.decode(errors="replace")
            if select.select([self.fd], [], [], 0.5)[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the terminal's other side closed
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"ended before {text!r}: {self.output.decode(errors='replace')}")
                self.output += chunk

    def finish(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                break
            assert time.monotonic() < deadline, self.output.decode(errors="replace")
            if select.select([self.fd], [], [], 0.2)[0]:
                try:
                    self.output += os.read(self.fd, 65536)
                except OSError:
                    pass
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(signal, "sigtimedwait"), reason="tells the senders apart with sigtimedwait")
def test_sigint_sent_to_gpudoctors_pid_at_a_terminal_is_forwarded(tmp_path: Path) -> None:
    run = AtTerminal(tmp_path / "reports", str(WORKLOADS / "counts_sigint.py"))
    run.read_until(b"ready")
    os.kill(run.pid, signal.SIGINT)  # to gpudoctor alone, as `kill -INT` does
    run.read_until(b"SIGINT count:")
    code = run.finish()
    assert b"SIGINT count: 1" in run.output, run.output.decode(errors="replace")
    assert code == 0
    assert b"ignored SIGINT" not in run.output


def test_ctrl_c_typed_at_the_terminal_reaches_the_workload_once(tmp_path: Path) -> None:
    run = AtTerminal(tmp_path / "reports", str(WORKLOADS / "counts_sigint.py"))
    run.read_until(b"ready")
    os.write(run.fd, b"\x03")  # the terminal sends SIGINT to its foreground group
    run.read_until(b"SIGINT count:")
    code = run.finish()
    assert b"SIGINT count: 1" in run.output, run.output.decode(errors="replace")
    assert code == 0
