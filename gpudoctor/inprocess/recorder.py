"""The samplers of a watch and the Session they make, the way the supervisor does under diagnose.

The same collectors run, in daemon threads of this process: psutil on this process
and its children (DataLoader workers), NVML on the GPUs this process opened (matched
by UUID once the agent reports them), the storage probe of each dataset found. A
ticker thread reads the agent's events as they are written, for the progress display
and for `Watch.steps`; `finish` assembles the Session with the same rules ("not
measured" is never zero: every missing fact carries its reason).
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpudoctor import __version__
from gpudoctor.agent.redact import redact_argv
from gpudoctor.collectors.cpu import CpuSampler, cpu_info
from gpudoctor.collectors.events import EventReader
from gpudoctor.collectors.storage import probe_in_background
from gpudoctor.run.gpu_monitor import GpuMonitor
from gpudoctor.session import Environment, Session, StorageProbe

log = logging.getLogger(__name__)

TICK_S = 0.5


@dataclass(frozen=True)
class Progress:
    """What the progress display shows, read by the ticker thread."""

    elapsed_s: float
    steps: int
    data_wait_share: float | None
    gpu_util_percent: float | None


class Recorder:
    def __init__(self, directory: Path, interval_s: float = 0.5, data_paths: tuple[str, ...] = (),
                 on_tick: Callable[[Progress], None] | None = None, poll_agent: Callable[[], None] | None = None,
                 source: str = "watch") -> None:
        self.directory = directory
        self.interval_s = interval_s
        self.data_paths = data_paths
        self.on_tick = on_tick
        self.poll_agent = poll_agent
        self.source = source
        self.t0 = time.time()
        self.started_at = datetime.datetime.now(datetime.timezone.utc)
        self.reader = EventReader(directory, self.t0)
        self.gpu = GpuMonitor(self.t0, interval_s)
        self.cpu: CpuSampler | None = None
        self.storage: dict[str, StorageProbe] = {}
        self._storage_threads: list[threading.Thread] = []
        self._reader_lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self.steps = 0

    def start(self) -> None:
        self.gpu.start()
        try:
            pid = os.getpid()
            self.cpu = CpuSampler(pid, self.t0, self.interval_s, main_pid=lambda: pid,
                                  worker_pids=lambda: set(self.reader.worker_to_loader))
            self.cpu.start()
        except Exception as exc:  # noqa: BLE001 (no CPU samples: the rest is recorded)
            log.debug("cpu sampler: %s", exc)
            self.cpu = None
        for path in self.data_paths:
            self._probe(path)
        self._ticker = threading.Thread(target=self._run, name="gpudoctor-watch", daemon=True)
        self._ticker.start()

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick()
            except Exception as exc:  # the display or a probe failing must not end the measurement
                log.debug("watch tick: %s", exc, exc_info=True)

    def tick(self) -> None:
        with self._reader_lock:
            self.reader.poll()
            self.steps = self.reader.step_count()
            wait = self.reader.data_wait_share()
            devices = [u for proc in self.reader.processes.values() for u in proc.info.device_uuids]
            roots = [lo.dataset_root for lo in self.reader.loaders.values() if lo.dataset_root]
        if devices:
            self.gpu.select(devices)
        for root in roots:
            self._probe(root)
        if self.poll_agent is not None:
            self.poll_agent()
        if self.on_tick is not None:
            self.on_tick(Progress(time.time() - self.t0, self.steps, wait, self.gpu.latest_util()))

    def _probe(self, path: str) -> None:
        probe_in_background(self.storage, self._storage_threads, path)

    def stop_sampling(self) -> tuple[object, float]:
        """Stop the threads; the GPU result and the duration (seconds since start)."""
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join(timeout=5)
        if self.cpu is not None:
            self.cpu.stop()
        gpu_result = self.gpu.stop()
        duration = time.time() - self.t0
        for thread in self._storage_threads:
            thread.join(timeout=5)
        return gpu_result, duration

    def session(self, gpu_result: object, duration: float, *, exit_code: int | None, stop_reason: str,
                command: list[str] | None = None, torch_error: str | None = None) -> Session:
        """The Session of this watch, assembled like the supervisor's (see supervisor._assemble)."""
        from gpudoctor.collectors.windows import apply_windows
        from gpudoctor.run.assemble import replay_window

        session = Session(
            tool_version=__version__,
            command=redact_argv(command if command is not None else [sys.executable, *sys.argv]),
            cwd=os.getcwd(),
            started_at=self.started_at.isoformat(timespec="seconds"),
            duration_s=round(duration, 3),
            exit_code=exit_code,
            stop_reason=stop_reason,
            source=self.source,
            environment=Environment(
                python=platform.python_version(),
                platform=platform.platform(),
                hostname=socket.gethostname(),
                cpu=cpu_info(os.getpid()),
                host_memory_total_bytes=psutil.virtual_memory().total,
            ),
        )
        with self._reader_lock:
            self.reader.apply(session)
        if self.cpu is not None:
            session.cpu_samples = self.cpu.samples
            session.cpu_sample_interval_s = self.cpu.effective_interval_s
            if self.cpu.error and not self.cpu.samples:
                session.unavailable["cpu"] = f"CPU sampling failed: {self.cpu.error}"
        if not session.cpu_samples:
            session.unavailable.setdefault("cpu", "the watch was too short for CPU samples")
        session.storage = list(self.storage.values())
        if not session.storage:
            session.unavailable.setdefault("storage", "no dataset path known (pass data=PATH to name it)")
        GpuMonitor.apply(gpu_result, session)
        apply_windows(self.reader.profiles, self.directory, session, self.t0, replay=replay_window)
        if session.allocator == []:
            session.unavailable.setdefault("allocator", "the watched code did not use the CUDA caching allocator")
        if torch_error:
            for fact in ("loader", "steps", "profile", "allocator"):
                session.unavailable[fact] = torch_error
        return session

    def trace_path(self) -> Path | None:
        for profile in self.reader.profiles:
            if profile.get("path"):
                candidate = self.directory / str(profile["path"])
                if candidate.exists():
                    return candidate
        return None
