"""The supervisor: runs the workload with the agent injected, samples it, survives it.

The workload's stdin/stdout/stderr are its own; gpudoctor writes only a status line
to stderr (when it is a terminal) and its summary at the end. Whatever happens to
the workload (exit, crash, signal, --duration, Ctrl-C), the supervisor still has its
samples and the agents' flushed events, and returns a Session.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from gpudoctor.agent import STOP_MARKER
from gpudoctor.base.text import printable
from gpudoctor.collectors.cpu import CpuSampler
from gpudoctor.collectors.events import EventReader
from gpudoctor.collectors.storage import probe_in_background
from gpudoctor.run.assemble import Recorded, assemble
from gpudoctor.run.gpu_monitor import GpuMonitor
from gpudoctor.run.process_tree import TreeWatch, leftover_note, process_group_members
from gpudoctor.run.signals import InterruptWatch, foreground_tty
from gpudoctor.run.status import HEARTBEAT_S, StatusLine, say
from gpudoctor.run.workdir import LaunchError, make_workdir
from gpudoctor.session import Session, StorageProbe

log = logging.getLogger(__name__)

SITE_DIR = Path(__file__).resolve().parents[1] / "agent" / "_site"
POLL_S = 0.25


@dataclass
class RunOptions:
    command: list[str]
    duration_s: float | None = None
    max_steps: int | None = None
    grace_s: float = 10.0  # SIGINT -> SIGTERM -> SIGKILL spacing when gpudoctor stops the run
    cpu_interval_s: float = 0.5
    gpu_interval_s: float = 0.5
    profile: bool = True
    profile_warmup_steps: int = 5
    profile_steps: int = 10
    profile_window_budget_s: float = 2.0  # slow steps close the window sooner (0: the steps asked for, always)
    profile_no_step_after_s: float = 3.0
    profile_time_window_s: float = 2.0
    profile_warmup_s: float = 1.0  # and at least this long into a phase before its window
    profile_max_windows: int = 4  # windows per process: start of steady state, new phases, one later
    profile_later_s: float = 60.0  # the later window comes at least this long after the first
    fetch_profile: bool = True  # cProfile a few batches in one loader process when input-bound
    data_paths: list[str] = field(default_factory=list)  # dataset locations given with --data
    live_status: bool | None = None  # None: when stderr is a terminal
    # where the session directory may go when the temporary directory cannot take it
    # (full, read-only): the report directory, already proven writable
    scratch_dirs: list[str] = field(default_factory=list)
    # `diagnose --try` runs only: remedies the agent applies (gpudoctor/agent/overrides.py) and
    # environment variables set for the workload (e.g. PYTORCH_CUDA_ALLOC_CONF); empty otherwise
    overrides: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None  # the workload's working directory (None: this process's)
    # diagnose --try: record where the workload writes (agent/writes.py); in a trial, refuse its
    # writes into this directory (the user's), and give it no stdin (the run before read it)
    record_writes: bool = False
    protect_writes: str | None = None
    stdin_devnull: bool = False


@dataclass
class RunResult:
    session: Session
    trace_path: Path | None  # raw profiler trace (in the temporary session dir)
    workdir: Path  # temporary session directory; the caller removes it

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


class Supervisor:
    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.t0 = time.time()
        self.cwd = _start_directory(options.cwd)
        self.workdir = make_workdir(options.scratch_dirs)
        self.reader = EventReader(self.workdir, self.t0)
        self.proc: subprocess.Popen[bytes] | None = None
        self.own_group = False
        self.stop_reason: str | None = None
        self.stop_requested_at: float | None = None
        self.escalation = 0
        self.interrupts = 0
        self.storage: dict[str, StorageProbe] = {}
        self._storage_threads: list[threading.Thread] = []
        self.escalated: list[str] = []  # signals sent after SIGINT was not enough
        self.stop_requested_t: float | None = None  # seconds into the run
        # uninstrumented Python processes; processes that outlive the workload
        self.tree = TreeWatch(str(self.workdir), str(SITE_DIR))
        self.uninstrumented = self.tree.uninstrumented
        self.leftovers: list[str] = []
        self._group_seen: list[int] = []  # the workload's process group when it ended
        self._next_env_check = 0.0
        self.primary_trace: str | None = None  # the primary profiler window's trace, in workdir

    # -- launching --------------------------------------------------------------
    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        existing = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(SITE_DIR) + (os.pathsep + existing if existing else "")
        env["GPUDOCTOR_SESSION_DIR"] = str(self.workdir)
        # our profiler window must not write kineto's progress lines into the workload's
        # stderr; a user who set the level keeps theirs
        env.setdefault("KINETO_LOG_LEVEL", "6")
        env["GPUDOCTOR_AGENT_CONFIG"] = json.dumps(
            {
                "profile": self.options.profile,
                "profile_warmup_steps": self.options.profile_warmup_steps,
                "profile_steps": self.options.profile_steps,
                "profile_window_budget_s": self.options.profile_window_budget_s,
                "profile_no_step_after_s": self.options.profile_no_step_after_s,
                "profile_time_window_s": self.options.profile_time_window_s,
                "profile_warmup_s": self.options.profile_warmup_s,
                "profile_max_windows": self.options.profile_max_windows,
                "profile_later_s": self.options.profile_later_s,
                "fetch_profile": self.options.fetch_profile,
                "record_writes": self.options.record_writes,
                "protect_writes": self.options.protect_writes,
            }
        )
        return _with_overrides(env, self.options)

    def _start(self) -> None:
        stdin_tty = foreground_tty()
        # At a terminal the workload stays in our process group, so Ctrl-C reaches it as
        # usual and it can read the terminal. Otherwise it gets a group of its own that
        # we can signal as a whole (torchrun, DataLoader workers, helpers).
        self.own_group = not stdin_tty
        # close_fds=False: descriptors gpudoctor inherited (`3>log` from a shell, a CI
        # runner's pipe) reach the workload as they would without gpudoctor; gpudoctor's own
        # descriptors are not inheritable (PEP 446), so none of them leak into it
        kwargs: dict[str, Any] = {"env": self._environment(), "close_fds": False}
        if self.options.cwd is not None:
            kwargs["cwd"] = self.options.cwd
            kwargs["env"]["PWD"] = self.options.cwd  # what a shell started there would say
        if self.options.stdin_devnull:
            kwargs["stdin"] = subprocess.DEVNULL
        if self.own_group:
            kwargs["process_group"] = 0
        self.proc = subprocess.Popen(self.options.command, **kwargs)

    # -- signals ---------------------------------------------------------------
    def _signal(self, sig: int) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            if self.own_group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill_tree(self) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            victims = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            victims = []
        self._signal(signal.SIGKILL)
        for child in victims:
            try:
                child.kill()
            except psutil.Error:
                pass

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self._mark_stop()
            try:  # the agents then do not show the KeyboardInterrupt this causes as a crash
                (self.workdir / STOP_MARKER).write_text(reason)
            except OSError:
                pass
            self._signal(signal.SIGINT)

    def _mark_stop(self) -> None:
        self.stop_requested_at = time.monotonic()
        self.stop_requested_t = round(time.time() - self.t0, 3)

    def _on_sigint(self, signum: int, frame: object) -> None:
        # no word on where it came from: at a terminal, assume the keyboard (see signals.py)
        self._interrupt(from_keyboard=not self.own_group and foreground_tty())

    def _interrupt(self, from_keyboard: bool) -> None:
        """A SIGINT to gpudoctor. One typed at the terminal already reached the workload
        (same process group); any other (kill -INT PID) is forwarded to it."""
        self.interrupts += 1
        if self.interrupts >= 2:
            say("\ngpudoctor: second Ctrl-C: stopping the workload now")
            self.stop_reason = "interrupted"
            self.escalated.append("SIGKILL")
            self._kill_tree()
            return
        say("\ngpudoctor: Ctrl-C: stopping the workload, the report follows (Ctrl-C again to stop now)")
        if self.stop_reason is None:
            self.stop_reason = "interrupted"
            self._mark_stop()
        if self.own_group or not from_keyboard:
            self._signal(signal.SIGINT)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        if self.stop_reason is None:
            self.stop_reason = "terminated"
            self._mark_stop()
        self._signal(signal.SIGTERM)

    def _escalate(self) -> None:
        """SIGINT first; SIGTERM after the grace period; then SIGKILL."""
        if self.stop_requested_at is None:
            return
        waited = time.monotonic() - self.stop_requested_at
        grace = self.options.grace_s
        if self.escalation == 0 and waited > grace:
            self.escalation = 1
            say(f"gpudoctor: workload still running {grace:g}s after SIGINT; sending SIGTERM")
            self.escalated.append("SIGTERM")
            self._signal(signal.SIGTERM)
        elif self.escalation == 1 and waited > grace * 1.5:
            self.escalation = 2
            say("gpudoctor: workload still running; sending SIGKILL")
            self.escalated.append("SIGKILL")
            self._kill_tree()

    # -- the run ---------------------------------------------------------------
    def run(self) -> RunResult:
        options = self.options
        previous_int = signal.signal(signal.SIGINT, self._on_sigint)
        previous_term = signal.signal(signal.SIGTERM, self._on_sigterm)
        gpu = GpuMonitor(self.t0, options.gpu_interval_s)
        status = StatusLine(enabled=options.live_status, heartbeat_s=HEARTBEAT_S)
        started_at = datetime.datetime.now(datetime.timezone.utc)
        cpu_sampler: CpuSampler | None = None
        watch: InterruptWatch | None = None
        try:
            try:
                self._start()
            except FileNotFoundError as exc:
                raise LaunchError(f"command not found: {options.command[0]}", 66) from exc
            except PermissionError as exc:
                raise LaunchError(f"cannot execute {options.command[0]}: permission denied", 69) from exc
            except OSError as exc:
                raise LaunchError(f"cannot start {options.command[0]}: {exc.strerror or exc}", 69) from exc
            assert self.proc is not None
            if not self.own_group:  # at a terminal: a Ctrl-C typed there, or a kill -INT of ours?
                watch = InterruptWatch(self._interrupt)
                if not watch.start():
                    watch = None
            gpu.start()  # gpudoctor's threads start after the watch blocked SIGINT for them
            cpu_sampler = CpuSampler(
                self.proc.pid, self.t0, options.cpu_interval_s,
                main_pid=lambda: (self.reader.primary() or (None, ""))[0],
                worker_pids=lambda: set(self.reader.worker_to_loader),
            )
            cpu_sampler.start()
            for path in options.data_paths:
                self._probe_storage(path)
            status.start()
            while self.proc.poll() is None:
                time.sleep(POLL_S)
                self._tick(gpu, status)
            self._tick(gpu, status)
            self._stop_group()
            self._find_leftovers()
        finally:
            status.stop()
            if watch is not None:
                watch.stop()
            signal.signal(signal.SIGINT, previous_int)
            signal.signal(signal.SIGTERM, previous_term)
            if cpu_sampler is not None:
                cpu_sampler.stop()
            gpu_result = gpu.stop()
        duration = time.time() - self.t0
        for thread in self._storage_threads:
            thread.join(timeout=5)
        session = self._assemble(started_at, duration, cpu_sampler, gpu_result)
        trace = self._trace_path()
        return RunResult(session=session, trace_path=trace, workdir=self.workdir)

    def _tick(self, gpu: GpuMonitor, status: StatusLine) -> None:
        self.reader.poll()
        options = self.options
        elapsed = time.time() - self.t0
        steps = self.reader.step_count()
        devices = [uuid for proc in self.reader.processes.values() for uuid in proc.info.device_uuids]
        if devices:
            gpu.select(devices)
        for loader in list(self.reader.loaders.values()):
            if loader.dataset_root:
                self._probe_storage(loader.dataset_root)
        if options.duration_s is not None and elapsed >= options.duration_s:
            self.request_stop("duration")
        if options.max_steps is not None and steps >= options.max_steps:
            self.request_stop("steps")
        self._escalate()
        if time.monotonic() >= self._next_env_check:
            self._next_env_check = time.monotonic() + 1.0
            if self.proc is not None:
                self.tree.scan(self.proc.pid, self.reader.processes)
        status.update(elapsed=elapsed, steps=steps, data_wait=self.reader.data_wait_share(),
                      gpu_util=gpu.latest_util())

    def _stop_group(self) -> None:
        """What is still in the workload's process group when it ended is stopped the way a
        Ctrl-C at a terminal stops a job: SIGINT to the group, SIGTERM after --grace, then
        SIGKILL. What left the group (a session of its own, a daemon) is named, not touched."""
        members = self._group_members()
        if not members:
            return
        grace = self.options.grace_s
        sent = []
        for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, grace / 2), (signal.SIGKILL, 2.0)):
            self._signal_members(sig, members)
            sent.append(signal.Signals(sig).name)
            members = self._wait_members(members, wait)
            if not members:
                break
        say(printable(f"gpudoctor: {len(self._group_seen)} process(es) still in the workload's process group "
                      f"when it ended; sent {' then '.join(sent)}"
                      + (f"; still running: {', '.join(str(p) for p in members)}" if members else "")))

    def _group_members(self) -> list[int]:
        """Live processes of the workload's process group (its own, or, at a terminal, the
        processes of ours started since the run began), not gpudoctor, not zombies."""
        assert self.proc is not None
        if self.own_group:
            candidates = process_group_members(self.proc.pid)
        else:  # not gpudoctor's own helpers (its children other than the workload)
            ours = {child.pid for child in psutil.Process().children()}
            candidates = [pid for pid in process_group_members(os.getpgrp())
                          if _started_since(pid, self.t0) and pid not in ours]
        members = [pid for pid in candidates if pid != os.getpid() and _alive(pid)]
        self._group_seen = list(members)
        return members

    def _signal_members(self, sig: int, members: list[int]) -> None:
        assert self.proc is not None
        targets = [self.proc.pid] if self.own_group else members
        for pid in targets:
            try:
                if self.own_group:
                    os.killpg(pid, sig)  # the group outlives its leader while it has members
                else:
                    os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    @staticmethod
    def _wait_members(members: list[int], seconds: float) -> list[int]:
        deadline = time.monotonic() + seconds
        while True:
            members = [pid for pid in members if _alive(pid)]
            if not members or time.monotonic() >= deadline:
                return members
            time.sleep(0.05)

    def _find_leftovers(self) -> None:
        assert self.proc is not None
        self.leftovers = self.tree.still_running(self.reader.processes, started_after=self.t0 - 1.0,
                                                 exclude={self.proc.pid},
                                                 group=self.proc.pid if self.own_group else None)
        if self.leftovers:
            say(printable(f"gpudoctor: {leftover_note(self.leftovers)}"))

    def _probe_storage(self, path: str) -> None:
        probe_in_background(self.storage, self._storage_threads, path)

    def _trace_path(self) -> Path | None:
        """The primary window's raw trace (saved beside the report)."""
        candidate = self.workdir / self.primary_trace if self.primary_trace else None
        return candidate if candidate is not None and candidate.exists() else None

    # -- the Session -----------------------------------------------------------
    def _assemble(self, started_at: datetime.datetime, duration: float, cpu_sampler: CpuSampler | None,
                  gpu_result: object) -> Session:
        assert self.proc is not None
        recorded = Recorded(
            command=self.options.command, t0=self.t0, workdir=self.workdir, cwd=self.cwd, reader=self.reader,
            started_at=started_at, duration_s=duration, returncode=self.proc.returncode,
            running_pid=self.proc.pid if self.proc.poll() is None else None,
            stop_reason=self.stop_reason, stop_requested_s=self.stop_requested_t,
            escalated=self.escalated, grace_s=self.options.grace_s, leftovers=self.leftovers,
            uninstrumented=self.uninstrumented, storage=self.storage, cpu_sampler=cpu_sampler,
            gpu_result=gpu_result,
        )
        session, self.primary_trace = assemble(recorded)
        return session


def _alive(pid: int) -> bool:
    try:
        alive: bool = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        return alive
    except psutil.Error:
        return False


def _started_since(pid: int, t0: float) -> bool:
    try:
        since: bool = psutil.Process(pid).create_time() >= t0 - 1.0
        return since
    except psutil.Error:
        return False


def _start_directory(given: str | None) -> str:
    """The workload's working directory, as an absolute path read at the start."""
    if given is not None:
        return given
    try:
        return os.getcwd()
    except OSError as exc:  # removed before the run began
        raise LaunchError(f"the current directory cannot be read ({exc.strerror or exc}): cd somewhere that exists",
                          69) from None


def _with_overrides(env: dict[str, str], options: RunOptions) -> dict[str, str]:
    """`diagnose --try` runs: the remedies go to the agent in its config ("overrides") and
    the environment variables into the environment. A plain run is returned unchanged."""
    if not options.overrides and not options.env:
        return env
    env.update(options.env)
    if options.overrides:
        config = json.loads(env["GPUDOCTOR_AGENT_CONFIG"])
        config["overrides"] = options.overrides
        env["GPUDOCTOR_AGENT_CONFIG"] = json.dumps(config)
    return env
