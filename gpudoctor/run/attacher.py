"""`gpudoctor attach PID`: sample a running process from outside, without the agent.

What can be measured from outside is measured with the samplers `diagnose` uses: psutil
on the process and its children (CPU per process, the main thread, resident memory),
NVML on the GPUs the process tree has open (found in NVML's process lists, matched by
UUID), the processes' own SM share where the driver keeps it. What only the agent
sees inside the process (DataLoader waits, steps, the profiler window, the allocator)
is not: the checks that need it are skipped with the reason "attach: no agent in the
process", and only checks that declare sampler facts alone run.

Where attaching is not possible gpudoctor says so in one line, with an exit code:
not Linux (69: /proc and NVML's process lists are what this reads), no such process
(66), a process this user may not read (77: run as its owner or as root).
"""

from __future__ import annotations

import datetime
import logging
import os
import platform
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import psutil

from gpudoctor import __version__
from gpudoctor.agent.redact import redact_argv
from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.collectors.cpu import CpuSampler, cpu_info
from gpudoctor.collectors.nvml_procs import ProcessGpuWatcher
from gpudoctor.model import Check
from gpudoctor.run.gpu_monitor import GpuMonitor
from gpudoctor.session import Environment, ProcessInfo, Session, StorageProbe

log = logging.getLogger(__name__)

NO_AGENT = "attach: no agent in the process"
AGENT_FACTS = ("loader", "steps", "profile", "allocator")
SAMPLER_FACTS = frozenset({"cpu", "gpu", "gpm", "clock_events", "storage"})
LOOKUP_EVERY_S = 1.0  # NVML process lists and the process tree are re-read this often


def runnable_without_agent(check: Check) -> bool:
    """A check can run on an attach Session when it declares facts, all from the samplers
    (a check that declares none may read anything, so it is not trusted to cope)."""
    return bool(check.requires) and set(check.requires) <= SAMPLER_FACTS


def open_target(pid: int) -> psutil.Process:
    """The process to attach to, or GpudoctorError with the one-line reason and exit code."""
    if not sys.platform.startswith("linux"):
        raise GpudoctorError(f"attach needs Linux (it reads /proc and NVML's process lists); this is "
                             f"{platform.system() or sys.platform}", exitcodes.NOT_RUNNABLE)
    if pid <= 0:
        raise GpudoctorError(f"not a process ID: {pid}", exitcodes.USAGE)
    if pid == os.getpid():
        raise GpudoctorError("cannot attach to gpudoctor itself", exitcodes.USAGE)
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            process.cpu_times()
            process.memory_info()
            process.cmdline()
        if process.status() == psutil.STATUS_ZOMBIE:
            raise GpudoctorError(f"process {pid} has exited (a zombie waiting for its parent)", exitcodes.NOT_FOUND)
        process.children(recursive=True)
    except psutil.NoSuchProcess:
        raise GpudoctorError(f"no process with PID {pid}", exitcodes.NOT_FOUND) from None
    except psutil.AccessDenied:
        owner = _owner(pid)
        raise GpudoctorError(f"no permission to read process {pid}{owner}: run gpudoctor as its user or as root",
                             exitcodes.NO_PERMISSION) from None
    return process


def _owner(pid: int) -> str:
    try:
        return f" (owned by {psutil.Process(pid).username()})"
    except psutil.Error:
        return ""


@dataclass
class AttachOptions:
    duration_s: float = 30.0
    interval_s: float = 0.5
    data_paths: tuple[str, ...] = ()  # dataset locations to probe (--data): the agent cannot say
    nvml: Any = None  # a pynvml-like module (tests inject a fake); None: pynvml


class Attacher:
    def __init__(self, process: psutil.Process, options: AttachOptions) -> None:
        self.process = process
        self.options = options
        self.t0 = time.time()
        self.stop_event = threading.Event()
        self.stop_reason = "duration"
        self.tree: dict[int, psutil.Process] = {}
        self.gpus = ProcessGpuWatcher(options.nvml)
        self.storage: dict[str, StorageProbe] = {}

    def interrupt(self) -> None:
        """Stop early (Ctrl-C): the report covers what was sampled so far."""
        self.stop_reason = "interrupted"
        self.stop_event.set()

    def run(self) -> Session:
        from gpudoctor.collectors.nvml import NvmlSampler

        options = self.options
        started_at = datetime.datetime.now(datetime.timezone.utc)
        pid = self.process.pid
        gpu = NvmlSampler(interval_s=options.interval_s, nvml=options.nvml, t0=self.t0)
        gpu.start()
        cpu = CpuSampler(pid, self.t0, options.interval_s, main_pid=lambda: pid, worker_pids=set)
        cpu.start()
        probes = [threading.Thread(target=self._probe, args=(path,), name="gpudoctor-storage", daemon=True)
                  for path in options.data_paths[:4]]
        for thread in probes:
            thread.start()
        deadline = time.monotonic() + options.duration_s
        try:
            while True:
                if not self._lookup(gpu):
                    self.stop_reason = "exited"
                    break
                left = deadline - time.monotonic()
                if left <= 0 or self.stop_event.wait(min(LOOKUP_EVERY_S, left)):
                    break
        finally:
            cpu.stop()
            gpu_result = gpu.stop()
            self.gpus.close()
            for thread in probes:
                thread.join(timeout=5)
        return self._session(started_at, cpu, gpu_result)

    def _probe(self, path: str) -> None:
        from gpudoctor.collectors.storage import probe

        self.storage[path] = StorageProbe(path=path, error="probe did not finish")
        self.storage[path] = probe(path)

    def _lookup(self, gpu: Any) -> bool:
        """Re-read the process tree and the GPUs it has open; False once the process is gone."""
        try:
            if not self.process.is_running() or self.process.status() == psutil.STATUS_ZOMBIE:
                return False
            tree = [self.process, *self.process.children(recursive=True)]
        except psutil.Error:
            return False
        for proc in tree:
            self.tree.setdefault(proc.pid, proc)
        self.gpus.poll(p.pid for p in tree)
        uuids = self.gpus.use.uuids()
        if uuids:
            gpu.select(uuids)
        return True

    def _session(self, started_at: datetime.datetime, cpu: CpuSampler, gpu_result: Any) -> Session:
        duration = time.time() - self.t0
        session = Session(
            tool_version=__version__,
            command=redact_argv(_cmdline(self.process)),
            cwd=_cwd(self.process),
            started_at=started_at.isoformat(timespec="seconds"),
            duration_s=round(duration, 3),
            exit_code=None,  # not our child: its exit status is its parent's to know
            stop_reason=self.stop_reason,
            source="attach",
            environment=Environment(
                python=platform.python_version(), platform=platform.platform(), hostname=socket.gethostname(),
                cpu=cpu_info(self.process.pid if self.stop_reason != "exited" else None),
                host_memory_total_bytes=psutil.virtual_memory().total,
            ),
        )
        use = self.gpus.use
        session.processes = [
            ProcessInfo(pid=p, ppid=_ppid(proc), role="main" if p == self.process.pid else "child",
                        argv=redact_argv(_cmdline(proc)), device_uuids=sorted(use.devices.get(p, ())))
            for p, proc in sorted(self.tree.items())
        ]
        session.cpu_samples = cpu.samples
        session.cpu_sample_interval_s = cpu.effective_interval_s
        if not session.cpu_samples:
            session.unavailable["cpu"] = (f"CPU sampling failed: {cpu.error}" if cpu.error
                                          else "the attach was too short for CPU samples")
        session.storage = list(self.storage.values())
        if not session.storage:
            session.unavailable["storage"] = f"{NO_AGENT} to find the dataset (name it with --data PATH)"
        for fact in AGENT_FACTS:
            session.unavailable[fact] = NO_AGENT
        GpuMonitor.apply(gpu_result, session)
        self._gpu_facts(session)
        if self.stop_reason == "exited":
            session.notes.append(f"process {self.process.pid} exited {duration:.1f}s into the attach; "
                                 "the report covers the time until then")
        session.notes.append("attached from outside (gpudoctor attach): CPU and GPU were sampled; the agent's "
                             "measurements (steps, DataLoader, profiler window, allocator) are not in this report")
        return session

    def _gpu_facts(self, session: Session) -> None:
        use = self.gpus.use
        if "gpu" in session.unavailable:
            session.torch_cuda_used = None
            return
        if not use.devices:
            why = use.error or ("NVML lists no GPU context of this process or its children (inside a container "
                                "NVML names processes by the host's PIDs)")
            session.unavailable["gpu"] = f"the process has no GPU open: {why}"
            session.unavailable["gpm"] = session.unavailable["clock_events"] = session.unavailable["gpu"]
            session.gpu_samples = []
            session.torch_cuda_used = False
            return
        session.torch_cuda_used = True
        for uuid, peak in sorted(use.peak_memory.items()):
            session.notes.append(f"GPU {uuid}: the process tree used up to {peak / 2**30:.2f} GiB (NVML)")
        if use.sm_util:
            values = list(use.sm_util.values())
            session.notes.append(f"the process tree's own SM share (NVML per-process samples): mean "
                                 f"{sum(values) / len(values):.0f}%, peak {max(values):.0f}% ({len(values)} samples)")


def attach_verdict(session: Session) -> str:
    """The verdict when sampling from outside measured nothing a diagnosis can stand on."""
    gpu = session.unavailable.get("gpu")
    why = f"no GPU samples of the process ({gpu})" if gpu else "too few GPU samples (attach for longer)"
    return (f"Nothing to judge from outside: {why}, and without the agent there are no steps to measure; "
            "for the full diagnosis run it under `gpudoctor diagnose` or wrap the loop in gpudoctor.watch().")


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return [str(a) for a in proc.cmdline()] or [proc.name()]
    except psutil.Error:
        return [f"pid {proc.pid}"]


def _cwd(proc: psutil.Process) -> str | None:
    try:
        cwd: str = proc.cwd()
        return cwd
    except psutil.Error:
        return None


def _ppid(proc: psutil.Process) -> int | None:
    try:
        ppid: int = proc.ppid()
        return ppid
    except psutil.Error:
        return None
