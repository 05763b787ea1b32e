"""Run one trial in a fresh child process and read its answer (the parent's side).

The child gets its own session (process group), so a timeout or a Ctrl-C in the
parent ends the child and anything it started, and nothing else. What the child
prints goes to a log file; its tail explains a crash.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import gpudoctor
from gpudoctor.sweep import records
from gpudoctor.sweep.records import TrialResult, TrialSpec

log = logging.getLogger(__name__)

TrialRunner = Callable[[int], TrialResult]
LOG_TAIL_LINES = 5


class SubprocessRunner:
    """Callable batch_size -> TrialResult; one child process per call."""

    def __init__(
        self,
        base: TrialSpec,
        workdir: Path,
        timeout_s: float,
        python: str = sys.executable,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.base = base
        self.workdir = Path(workdir)
        self.timeout_s = timeout_s
        self.python = python
        self.extra_env = extra_env or {}
        self._count = 0
        # learnt from the first answer when --device auto: a CPU run's SIGKILL means host OOM
        self.device_type: str | None = None if base.device == "auto" else base.device.split(":")[0]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The child must import this very gpudoctor (a source checkout works too).
        root = str(Path(gpudoctor.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env.update(self.extra_env)
        return env

    def __call__(self, batch_size: int) -> TrialResult:
        self._count += 1
        stem = self.workdir / f"trial-{self._count:03d}-bs{batch_size}"
        spec_path, result_path, log_path = (Path(f"{stem}.{ext}") for ext in ("spec.json", "result.json", "log"))
        spec_path.write_text(json.dumps(replace(self.base, batch_size=batch_size).to_dict()))
        command = [self.python, "-m", "gpudoctor.sweep.trial", "--spec", str(spec_path), "--result", str(result_path)]
        log.debug("trial: %s", " ".join(command))
        with open(log_path, "wb") as output:
            child = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                env=self._env(), start_new_session=True,
            )
            try:
                returncode = child.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(child)
                return TrialResult(
                    batch_size, records.TIMEOUT, message=f"no answer within {self.timeout_s:g} s (--trial-timeout-s)"
                )
            except BaseException:  # Ctrl-C: the child is in its own session, end it here
                _kill_group(child)
                raise
        if result_path.exists():
            try:
                result = TrialResult.from_dict(json.loads(result_path.read_text()))
            except (ValueError, TypeError) as exc:
                return TrialResult(batch_size, records.CRASHED, message=f"unreadable trial answer: {exc}")
            self.device_type = result.device.get("type") or self.device_type
            return result
        return self._crashed(batch_size, returncode, log_path)

    def _crashed(self, batch_size: int, returncode: int, log_path: Path) -> TrialResult:
        tail = _tail(log_path)
        if returncode < 0:
            name = _signal_name(-returncode)
            if -returncode == signal.SIGKILL and self.device_type == "cpu":
                # On a CPU run the kernel's OOM killer is the usual sender of SIGKILL.
                return TrialResult(batch_size, records.OOM, message=f"killed by {name} (host out of memory?)")
            message = f"trial process killed by {name}"
        else:
            message = f"trial process exited with status {returncode} without an answer"
        return TrialResult(batch_size, records.CRASHED, message=f"{message}: {tail}" if tail else message)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tail(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-LOG_TAIL_LINES:])[-400:]
