"""Run trials in child processes and read their answers (the parent's side).

A trial process (gpudoctor.sweep.worker) takes sizes one at a time over a pipe. Far
from the memory edge the next size reuses the process that ran the last one; near it,
after any failure, and whenever the process says it could not clean up, the size runs
in a fresh process (gpudoctor.sweep.reuse decides). At most one trial process lives at
a time, so a fresh process never shares the device with an idle one. A size that fails
in a reused process is run again in a fresh one, and that answer counts.

Each process gets its own session (process group), so a timeout or a Ctrl-C in the
parent ends it and anything it started, and nothing else. What it prints goes to a log
file; its tail explains a crash.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

import gpudoctor
from gpudoctor.sweep import records
from gpudoctor.sweep.records import TrialResult, TrialSpec
from gpudoctor.sweep.reuse import Decision, ReusePolicy

log = logging.getLogger(__name__)

TrialRunner = Callable[[int], TrialResult]
LOG_TAIL_LINES = 5
CLOSE_GRACE_S = 30.0  # a process leaving a CUDA context may take seconds to exit
# failures in a reused process that a fresh process must confirm (the process's state
# may be the cause); a timeout is not run twice, nor a target that cannot be used
RETRY_FRESH = (records.OOM, records.ERROR, records.CUDA_ERROR, records.CRASHED)


class _Timeout(Exception):
    pass


class TrialProcess:
    """One trial process: started, given sizes one at a time, then closed."""

    def __init__(self, python: str, env: dict[str, str], log_path: Path) -> None:
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        self.log_path = log_path
        self.started = time.perf_counter()
        command = [python, "-m", "gpudoctor.sweep.worker", "--commands", str(commands_read),
                   "--replies", str(replies_write)]
        log.debug("trial process: %s", " ".join(command))
        try:
            with open(log_path, "wb") as output:
                self.child = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True, pass_fds=(commands_read, replies_write),
                )
        except BaseException:
            for fd in (self._commands, self._replies):
                os.close(fd)
            raise
        finally:
            os.close(commands_read)
            os.close(replies_write)
        self._buffer = b""
        self.sizes_run = 0

    def read(self, deadline: float) -> dict[str, Any] | None:
        """The next answer; None when the process ended without one. _Timeout past `deadline`."""
        while b"\n" not in self._buffer:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise _Timeout
            ready, _, _ = select.select([self._replies], [], [], left)
            if not ready:
                continue
            data = os.read(self._replies, 65536)
            if not data:
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            answer = json.loads(line)
        except ValueError:
            return None
        return answer if isinstance(answer, dict) else None

    def send(self, request: dict[str, Any]) -> bool:
        try:
            os.write(self._commands, json.dumps(request).encode() + b"\n")
        except OSError:  # BrokenPipeError: it is gone; read() will say so
            return False
        self.sizes_run += 1
        return True

    def returncode(self) -> int:
        return self.child.wait()

    def close(self) -> None:
        """End of the commands: the process exits; past CLOSE_GRACE_S its group is killed."""
        self._close_fds()
        try:
            self.child.wait(timeout=CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        self._close_fds()
        try:
            os.killpg(self.child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.child.wait()

    def _close_fds(self) -> None:
        for name in ("_commands", "_replies"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


class SubprocessRunner:
    """Callable batch_size -> TrialResult, in a reused or a fresh child process.

    `reuse`: the policy that lets a size reuse the last process (None: a fresh process
    for every size). `probe_base`: the settings of `probe(size)`, a fit probe.
    Close it (or use it as a context manager) to end the last process.
    """

    def __init__(
        self,
        base: TrialSpec,
        workdir: Path,
        timeout_s: float,
        python: str = sys.executable,
        extra_env: dict[str, str] | None = None,
        reuse: ReusePolicy | None = None,
        probe_base: TrialSpec | None = None,
    ) -> None:
        self.base = base
        self.probe_base = probe_base or base
        self.workdir = Path(workdir)
        self.timeout_s = timeout_s
        self.python = python
        self.extra_env = extra_env or {}
        self.reuse = reuse
        self.history: list[TrialResult] = []  # every answer, in order: what reuse decides from
        self._count = 0
        self._processes = 0
        self._process: TrialProcess | None = None
        self._reuse_ended: str | None = None  # why no process is reused any more
        # learnt from the first answer when --device auto: a CPU run's SIGKILL means host OOM
        self.device_type: str | None = None if base.device == "auto" else base.device.split(":")[0]

    def __call__(self, batch_size: int) -> TrialResult:
        return self._trial(replace(self.base, batch_size=batch_size), "")

    def probe(self, batch_size: int) -> TrialResult:
        """A fit probe: with `probe_base` from gpudoctor.commands.sweep.probe_spec, a fit
        check (a few steps to the peak memory, untimed)."""
        return self._trial(replace(self.probe_base, batch_size=batch_size), ".probe")

    def close(self) -> None:
        if self._process is not None:
            process, self._process = self._process, None
            try:
                process.close()
            except BaseException:  # Ctrl-C while it exits: end it now
                process.kill()
                raise

    def __enter__(self) -> SubprocessRunner:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def decide(self, batch_size: int) -> Decision:
        if self.reuse is None:
            return Decision(False, "a fresh process for every size")
        if self.base.compile:
            # dynamo keeps its compiled graphs and turns a dimension seen at two sizes
            # dynamic: a reused process would measure another program than a fresh one
            return Decision(False, "--compile: each size is compiled in a fresh process")
        if self._reuse_ended is not None:
            return Decision(False, self._reuse_ended)
        if self._process is None:
            return Decision(False, "no process to reuse")
        return self.reuse.decide(self.history, batch_size)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # The child must import this very gpudoctor (a source checkout works too).
        root = str(Path(gpudoctor.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env.update(self.extra_env)
        return env

    def _trial(self, spec: TrialSpec, suffix: str) -> TrialResult:
        decision = self.decide(spec.batch_size)
        log.debug("batch %d: %s", spec.batch_size, decision.reason)
        result = self._run(spec, suffix, decision.reuse)
        if result.process_reused and result.status in RETRY_FRESH:
            first = result
            self._reuse_ended = f"reuse ended: batch {spec.batch_size} failed in a reused process ({first.status})"
            log.info("batch %d failed in a reused process (%s); again in a fresh one", spec.batch_size, first.status)
            result = self._run(spec, suffix, reuse=False)
            result.reuse_fallback = f"first run, in a reused process: {first.status}: {first.message or ''}"[:400]
            result.phase_s["reused_attempt"] = round(first.phase_s.get("call", 0.0), 4)
        self.history.append(result)
        return result

    def _run(self, spec: TrialSpec, suffix: str, reuse: bool) -> TrialResult:
        called = time.perf_counter()
        phases: dict[str, float] = {}
        if not reuse:
            if self._process is not None:
                self.close()
                phases["close_previous"] = round(time.perf_counter() - called, 4)
            self._processes += 1
            self._process = TrialProcess(self.python, self._env(), self.workdir / f"process-{self._processes:03d}.log")
        process = self._process
        assert process is not None
        self._count += 1
        stem = self.workdir / f"trial-{self._count:03d}-bs{spec.batch_size}{suffix}"
        spec_path, result_path = Path(f"{stem}.spec.json"), Path(f"{stem}.result.json")
        spec_path.write_text(json.dumps(spec.to_dict()))
        deadline = (process.started if not reuse else called) + self.timeout_s
        try:
            answer = self._exchange(process, reuse, spec_path, result_path, deadline, phases)
        except _Timeout:
            self._process = None
            process.kill()
            result = TrialResult(
                spec.batch_size, records.TIMEOUT, message=f"no answer within {self.timeout_s:g} s (--trial-timeout-s)"
            )
            return self._stamp(result, reuse, phases, called)
        except BaseException:  # Ctrl-C: the process is in its own session, end it here
            self._process = None
            process.kill()
            raise
        result = self._answer(spec.batch_size, process, answer, result_path)
        if answer is None or not answer.get("reusable") or result.status != records.OK:
            if answer is not None and answer.get("why"):
                log.debug("trial process not reused: %s", answer["why"])
            self.close()
        return self._stamp(result, reuse, phases, called)

    def _exchange(self, process: TrialProcess, reuse: bool, spec_path: Path, result_path: Path,
                  deadline: float, phases: dict[str, float]) -> dict[str, Any] | None:
        if not reuse:
            if process.read(deadline) is None:  # {"ready": true} once torch is imported
                return None
            phases["start"] = round(time.perf_counter() - process.started, 4)
        if not process.send({"spec": str(spec_path), "result": str(result_path)}):
            return None
        return process.read(deadline)

    def _answer(self, batch_size: int, process: TrialProcess, answer: dict[str, Any] | None,
                result_path: Path) -> TrialResult:
        if result_path.exists():
            try:
                result = TrialResult.from_dict(json.loads(result_path.read_text()))
            except (ValueError, TypeError) as exc:
                return TrialResult(batch_size, records.CRASHED, message=f"unreadable trial answer: {exc}")
            self.device_type = result.device.get("type") or self.device_type
            return result
        self._process = None
        process.close()
        return self._crashed(batch_size, process.returncode(), process.log_path)

    @staticmethod
    def _stamp(result: TrialResult, reuse: bool, phases: dict[str, float], called: float) -> TrialResult:
        result.process_reused = reuse
        result.phase_s.update(phases)
        result.phase_s["call"] = round(time.perf_counter() - called, 4)
        return result

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
