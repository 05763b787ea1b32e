"""Read the agents' event files (incrementally, while the run goes on) into Session parts.

The supervisor polls `EventReader.poll()` for the live status line and --steps, and
calls `apply(session)` once at the end. Torn last lines (a process killed while
writing) are skipped, never fatal.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoctor.agent import protocol
from gpudoctor.collectors.windows import counted_step
from gpudoctor.session import (
    AllocatorSnapshot,
    AppliedOverride,
    ErrorEvent,
    FetchFunction,
    FetchProfile,
    LoaderInfo,
    ProcessInfo,
    Session,
    StepRecord,
    Steps,
)

log = logging.getLogger(__name__)

STEP_RECORDS_MAX = 5000  # step records kept in the Session (aggregates count the rest)
OVERRIDES_MAX = 100  # `--try` overrides kept (the agent sends at most 40 per process)
ERRORS_MAX = 100  # uncaught exceptions kept (the first ones: causes come before consequences)
WARMUP_STEPS = 2  # leading steps left out of steady-state numbers (imports, cudnn autotune, compile)
AFTER_WINDOW_S = 0.5  # steps starting this soon after a profiler window are left out too ...
AFTER_WINDOW_STEPS = 3  # ... but no more than this many median steps' worth
MAX_WRITES = 2000  # diagnose --try: written paths kept (each agent sends at most 500)


@dataclass(frozen=True)
class WrittenPath:
    """A path the workload wrote (diagnose --try); path None: more than the agent records."""

    path: str | None
    relative: bool  # given relative to the process's working directory
    cwd: str | None  # that working directory


@dataclass
class _StepSource:
    records: list[StepRecord] = field(default_factory=list)
    aggregated: int = 0
    aggregated_duration_s: float = 0.0
    aggregated_wait_s: float = 0.0
    count: int = 0
    last_t: float | None = None  # end of the latest step (an aggregate: when it was flushed)


@dataclass
class _ProcessState:
    info: ProcessInfo
    steps: dict[str, _StepSource] = field(default_factory=dict)
    loader_stats: dict[str, list[float]] = field(default_factory=dict)
    fetch: dict[str, list[Any]] = field(default_factory=dict)  # as sent: [batches, wall s, CPU s, run queue s | None]
    fetch_profile: FetchProfile | None = None  # where this process spent its time making batches
    fetch_profile_loader: str | None = None  # the loader it fetched for (main process: its id)
    forward_root: str | None = None  # the module whose outermost forward marks steps
    # torch.distributed: what the launcher said (environment) and what the process group said
    env_rank: int | None = None
    env_local_rank: int | None = None
    env_world_size: int | None = None
    env_local_world_size: int | None = None
    job_id: str | None = None
    dist_rank: int | None = None
    dist_world_size: int | None = None
    backend: str | None = None


def _apply_loader_stats(loader: LoaderInfo, values: list[float]) -> None:
    """A "loader_stats" entry (protocol.LoaderStats) onto its loader."""
    batches, wait, wait_max = values[:3]
    loader.batches = int(batches)
    loader.wait_total_s = float(wait)
    loader.wait_max_s = float(wait_max)
    if len(values) >= 5:  # older agents did not time iterator creation
        loader.iterators = int(values[3])
        loader.iterators_s = float(values[4])


class EventReader:
    def __init__(self, directory: Path, t0: float) -> None:
        self.directory = Path(directory)
        self.t0 = t0
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self.processes: dict[int, _ProcessState] = {}
        self.loaders: dict[str, LoaderInfo] = {}
        self.worker_to_loader: dict[int, str] = {}
        self.errors: list[ErrorEvent] = []
        self.allocator: list[AllocatorSnapshot] = []
        self.profiles: list[dict[str, Any]] = []
        self.cuda_devices: dict[int, list[protocol.CudaDevice]] = {}
        self.torch_versions: dict[int, tuple[str | None, str | None]] = {}
        self.agent_errors: list[str] = []
        self.interrupted = False
        self.interrupted_by_gpudoctor: set[int] = set()  # processes that ended on our stop's KeyboardInterrupt
        self.writes: list[WrittenPath] = []  # diagnose --try: where the workload wrote
        self.malformed_lines = 0
        self.byes: set[int] = set()  # processes whose Python exit handlers ran
        self.errors_dropped = 0
        self.overrides: list[AppliedOverride] = []

    # -- reading ---------------------------------------------------------------
    def poll(self) -> None:
        try:
            names = sorted(os.listdir(self.directory))
        except OSError:
            return
        for name in names:
            if name.startswith("events-") and name.endswith(".jsonl"):
                self._read(self.directory / name)

    def _read(self, path: Path) -> None:
        offset = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError:
            return
        if not data:
            return
        self._offsets[path] = offset + len(data)
        data = self._partial.pop(path, b"") + data
        lines = data.split(b"\n")
        if lines[-1]:
            self._partial[path] = lines[-1]  # incomplete line: wait for the rest
        pid = _pid_from_name(path.name)
        for line in lines[:-1]:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                self.malformed_lines += 1
                continue
            if isinstance(event, dict):
                try:
                    self._handle(pid, event)
                except (TypeError, ValueError, KeyError) as exc:
                    self.malformed_lines += 1
                    log.debug("bad event %r: %s", event, exc)

    def _process(self, pid: int) -> _ProcessState:
        state = self.processes.get(pid)
        if state is None:
            state = self.processes[pid] = _ProcessState(ProcessInfo(pid=pid))
        return state

    def _handle(self, pid: int, e: dict[str, Any]) -> None:
        kind = e.get("k")
        proc = self._process(pid)
        t = float(e.get("ts", self.t0)) - self.t0
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(self, pid, proc, t, e)

    # -- one handler per event kind (the agent's events: gpudoctor/agent/) ------
    def _on_hello(self, pid: int, proc: _ProcessState, t: float, e: protocol.Hello) -> None:
        proc.info.ppid = e.get("ppid")
        proc.info.argv = [str(a) for a in e.get("argv") or []]
        proc.info.cuda_visible_devices = e.get("cuda_visible_devices")
        if e.get("role") == "worker":
            proc.info.role = "worker"
            proc.info.profiler_inherited = bool(e.get("profiler_inherited"))
        proc.env_rank, proc.env_local_rank = _int(e.get("rank")), _int(e.get("local_rank"))
        proc.env_world_size, proc.env_local_world_size = _int(e.get("world_size")), _int(e.get("local_world_size"))
        proc.job_id = str(e["job_id"]) if e.get("job_id") else None

    def _on_dist(self, pid: int, proc: _ProcessState, t: float, e: protocol.Dist) -> None:
        proc.dist_rank, proc.dist_world_size = _int(e.get("rank")), _int(e.get("world_size"))
        proc.backend = str(e.get("backend")) if e.get("backend") else None

    def _on_process(self, pid: int, proc: _ProcessState, t: float, e: protocol.Process) -> None:
        proc.info.argv = [str(a) for a in e.get("argv") or []]

    def _on_torch(self, pid: int, proc: _ProcessState, t: float, e: protocol.Torch) -> None:
        proc.info.torch = e.get("version")
        self.torch_versions[pid] = (e.get("version"), e.get("cuda"))

    def _on_step(self, pid: int, proc: _ProcessState, t: float, e: protocol.Step) -> None:
        src = proc.steps.setdefault(str(e["src"]), _StepSource())
        src.count += 1
        src.last_t = max(t, src.last_t if src.last_t is not None else t)
        if len(src.records) < STEP_RECORDS_MAX:
            src.records.append(StepRecord(t=t, duration_s=float(e["dur"]), data_wait_s=float(e["wait"]),
                                          backward_s=float(e["bwd"]) if e.get("bwd") is not None else None))
        else:
            src.aggregated += 1
            src.aggregated_duration_s += float(e["dur"])
            src.aggregated_wait_s += float(e["wait"])

    def _on_steps_agg(self, pid: int, proc: _ProcessState, t: float, e: protocol.StepsAgg) -> None:
        src = proc.steps.setdefault(str(e["src"]), _StepSource())
        src.count += int(e["n"])
        src.last_t = max(t, src.last_t if src.last_t is not None else t)
        src.aggregated += int(e["n"])
        src.aggregated_duration_s += float(e["dur"])
        src.aggregated_wait_s += float(e["wait"])

    def _on_loader(self, pid: int, proc: _ProcessState, t: float, e: protocol.Loader) -> None:
        loader_id = str(e["id"])
        self.loaders[loader_id] = LoaderInfo(
            loader_id=loader_id,
            pid=pid,
            num_workers=int(e.get("num_workers") or 0),
            batch_size=e.get("batch_size") if isinstance(e.get("batch_size"), int) else None,
            pin_memory=e.get("pin_memory"),
            persistent_workers=e.get("persistent_workers"),
            prefetch_factor=e.get("prefetch_factor"),
            dataset_class=e.get("dataset_class"),
            dataset_len=e.get("dataset_len"),
            dataset_root=e.get("dataset_root"),
            iterable=bool(e.get("iterable")),
        )

    def _on_loader_workers(self, pid: int, proc: _ProcessState, t: float, e: protocol.LoaderWorkers) -> None:
        for worker in e.get("pids") or []:
            self.worker_to_loader[int(worker)] = str(e["id"])
            self._process(int(worker)).info.role = "worker"

    def _on_loader_stats(self, pid: int, proc: _ProcessState, t: float, e: protocol.LoaderStats) -> None:
        proc.loader_stats = {str(k): list(v) for k, v in (e.get("stats") or {}).items()}

    def _on_fetch(self, pid: int, proc: _ProcessState, t: float, e: protocol.Fetch) -> None:
        proc.fetch = {str(k): list(v) for k, v in (e.get("stats") or {}).items()}

    def _on_fetch_profile(self, pid: int, proc: _ProcessState, t: float, e: protocol.FetchProfile) -> None:
        proc.fetch_profile = FetchProfile(
            pid=pid, batches=int(e.get("batches") or 0), wall_s=float(e.get("wall_s") or 0.0),
            worker=e.get("worker") if isinstance(e.get("worker"), int) else None,
            t_start=self._session_time(e.get("t_start")), t_end=self._session_time(e.get("t_end")),
            complete=e.get("complete") is not False,
            functions=[FetchFunction(name=str(f[0]), file=str(f[1]), line=int(f[2]), own_s=float(f[3]),
                                     cumulative_s=float(f[4]), calls=int(f[5]),
                                     caller=str(f[6]) if f[6] is not None else None)
                       for f in e.get("functions") or [] if isinstance(f, list) and len(f) >= 7])
        proc.fetch_profile_loader = str(e["loader"]) if e.get("loader") is not None else None

    def _session_time(self, wall: object) -> float | None:
        """A wall-clock time of an event's field as seconds since the session start."""
        return round(float(wall) - self.t0, 6) if isinstance(wall, (int, float)) and wall > 0 else None

    def _on_forward_root(self, pid: int, proc: _ProcessState, t: float, e: protocol.ForwardRoot) -> None:
        proc.forward_root = str(e.get("module") or "") or None

    def _on_exception(self, pid: int, proc: _ProcessState, t: float, e: protocol.Uncaught) -> None:
        """An uncaught exception."""
        self._uncaught("exception", pid, t, e)

    def _on_oom(self, pid: int, proc: _ProcessState, t: float, e: protocol.Uncaught) -> None:
        """An uncaught CUDA out-of-memory error."""
        self._uncaught("oom", pid, t, e)

    def _uncaught(self, kind: str, pid: int, t: float, e: protocol.Uncaught) -> None:
        if len(self.errors) >= ERRORS_MAX:
            self.errors_dropped += 1
            return
        self.errors.append(ErrorEvent(pid=pid, kind=kind, type=e.get("type"),
                                      message=str(e.get("message") or ""), traceback=e.get("traceback"), t=t))
        allocator = e.get("allocator")
        if isinstance(allocator, dict):
            self._alloc({**allocator, "label": "oom"}, t)

    def _on_oom_observed(self, pid: int, proc: _ProcessState, t: float, e: protocol.OomObserved) -> None:
        """An allocation failure the allocator saw (the workload may have caught the error)."""
        if len(self.errors) >= ERRORS_MAX:
            return
        self.errors.append(
            ErrorEvent(pid=pid, kind="oom", type="torch.cuda.OutOfMemoryError",
                       message=f"allocation of {e.get('request_bytes')} bytes failed "
                               f"(device free {e.get('device_free')} bytes)", t=t)
        )
        allocator = e.get("allocator")
        if isinstance(allocator, dict):
            self._alloc({**allocator, "label": "oom"}, t)

    def _on_write(self, pid: int, proc: _ProcessState, t: float, e: protocol.Write) -> None:
        """diagnose --try: a path the workload wrote (agent/writes.py); None: more than it records."""
        path = e.get("path")
        if len(self.writes) < MAX_WRITES:
            self.writes.append(WrittenPath(path=path if isinstance(path, str) else None,
                                           relative=bool(e.get("relative")),
                                           cwd=e.get("cwd") if isinstance(e.get("cwd"), str) else None))

    def _on_interrupt(self, pid: int, proc: _ProcessState, t: float, e: protocol.Interrupt) -> None:
        self.interrupted = True
        if e.get("by_gpudoctor"):
            self.interrupted_by_gpudoctor.add(pid)

    def _on_alloc(self, pid: int, proc: _ProcessState, t: float, e: protocol.AllocatorSnapshot) -> None:
        self._alloc(e, t)

    def _on_cuda(self, pid: int, proc: _ProcessState, t: float, e: protocol.Cuda) -> None:
        self.cuda_devices[pid] = list(e.get("devices") or [])
        proc.info.device_uuids = [str(d.get("uuid")) for d in self.cuda_devices[pid] if d.get("uuid")]

    def _on_profile(self, pid: int, proc: _ProcessState, t: float, e: protocol.Profile) -> None:
        self.profiles.append({**e, "pid": pid})

    def _on_override(self, pid: int, proc: _ProcessState, t: float, e: protocol.Override) -> None:
        self._override(pid, e)

    def _on_bye(self, pid: int, proc: _ProcessState, t: float, e: protocol.Bye) -> None:
        self.byes.add(pid)

    def _on_agent_error(self, pid: int, proc: _ProcessState, t: float, e: protocol.AgentError) -> None:
        if len(self.agent_errors) < 50:
            self.agent_errors.append(f"pid {pid}: {e.get('where')}: {e.get('error')}")

    def _override(self, pid: int, e: protocol.Override) -> None:
        """A remedy applied by the agent in a `--try` run (gpudoctor/agent/overrides.py)."""
        if len(self.overrides) < OVERRIDES_MAX:
            self.overrides.append(AppliedOverride(
                name=str(e.get("name")), value=e.get("value"), was=e.get("was"), where=e.get("where"),
                applied=bool(e.get("applied", True)), note=e.get("note"), pid=pid))

    def _alloc(self, e: Mapping[str, Any], t: float) -> None:
        """An allocator snapshot ("alloc", or inside "oom"/"oom_observed") into the Session's."""
        fields = {k: e[k] for k in AllocatorSnapshot.__dataclass_fields__ if k in e and k != "t"}
        fields.setdefault("label", "periodic")
        snap = AllocatorSnapshot(t=t, **fields)
        # keep the first and the latest periodic snapshots, and every labelled one
        if snap.label == "periodic" and self.allocator and self.allocator[-1].label == "periodic" and \
                sum(1 for a in self.allocator if a.label == "periodic") >= 2:
            self.allocator[-1] = snap
        else:
            self.allocator.append(snap)

    # -- ranks -----------------------------------------------------------------
    def rank_of(self, pid: int) -> int | None:
        """The rank a process trained as: its process group's, else the launcher's RANK when
        it stepped (torchrun's own process has no RANK and never steps, so it has none)."""
        proc = self.processes.get(pid)
        if proc is None or proc.info.role == "worker" or pid in self.worker_to_loader:
            return None
        if proc.dist_rank is not None:
            return proc.dist_rank
        return proc.env_rank if proc.steps and proc.env_world_size else None

    def ranks(self) -> dict[int, int]:
        """rank -> pid. Two processes claiming one rank (a restarted worker): the one that
        joined a process group, then the one with more steps."""
        chosen: dict[int, tuple[tuple[int, int], int]] = {}
        for pid, proc in self.processes.items():
            rank = self.rank_of(pid)
            if rank is None:
                continue
            key = (int(proc.dist_rank is not None), sum(s.count for s in proc.steps.values()))
            if rank not in chosen or key > chosen[rank][0]:
                chosen[rank] = (key, pid)
        return {rank: pid for rank, (_, pid) in sorted(chosen.items())}

    def primary_pid(self) -> int | None:
        """The process of the primary view: rank 0 (the lowest rank seen) in a distributed job."""
        ranks = self.ranks()
        return ranks[min(ranks)] if ranks else None

    # -- live numbers ----------------------------------------------------------
    def primary(self) -> tuple[int, str] | None:
        """(pid, source) of the step stream that describes the run best (in a distributed
        job, the primary rank's)."""
        only = self.primary_pid()
        return (self.best_source(only) if only is not None else None) or self.best_source(None)

    def best_source(self, only: int | None) -> tuple[int, str] | None:
        """(pid, source) of the best step stream, of process `only` or of any process."""
        best: tuple[int, str] | None = None
        best_key: tuple[int, int] = (-1, -1)
        for pid, proc in self.processes.items():
            if only is not None and pid != only:
                continue
            for source, data in proc.steps.items():
                key = (_SOURCE_RANK.get(source, 0), data.count)
                if key > best_key:
                    best, best_key = (pid, source), key
        if best is not None:
            pid, source = best
            steps = self.processes[pid].steps
            # several optimizers (GANs) or backward calls per iteration: loader batches count
            # iterations better
            if source in ("optimizer", "backward") and "loader" in steps and \
                    steps[source].count > 1.5 * steps["loader"].count:
                return pid, "loader"
        return best

    def step_count(self) -> int:
        best = self.primary()
        if best is None:
            return 0
        pid, source = best
        return self.processes[pid].steps[source].count

    def data_wait_share(self) -> float | None:
        best = self.primary()
        if best is None:
            return None
        pid, source = best
        records = self.processes[pid].steps[source].records[WARMUP_STEPS:]
        total = sum(r.duration_s for r in records)
        if total <= 0:
            return None
        return sum(min(r.data_wait_s, r.duration_s) for r in records) / total

    # -- final assembly ----------------------------------------------------------
    def apply(self, session: Session) -> None:
        self.poll()
        for pid, proc in self.processes.items():
            if pid in self.worker_to_loader:
                proc.info.role = "worker"
            elif proc.info.role != "worker" and proc.info.ppid in self.processes:
                proc.info.role = "child"
            if proc.info.role != "worker":  # workers always leave through os._exit
                proc.info.exit_handlers_ran = pid in self.byes or (None if _alive(pid) else False)
        for rank, pid in self.ranks().items():
            self.processes[pid].info.rank = rank
        session.processes = [p.info for p in sorted(self.processes.values(), key=lambda p: p.info.pid)]
        self._apply_loaders(session)
        self._apply_steps(session)
        session.errors.extend(self.errors)
        session.allocator = sorted(self.allocator, key=lambda a: a.t)
        for version, cuda in self.torch_versions.values():
            session.environment.torch = session.environment.torch or version
            session.environment.cuda = session.environment.cuda or cuda
        session.torch_cuda_used = bool(self.cuda_devices) if self.torch_versions else None
        session.overrides = list(self.overrides)
        roots = [pid for pid, proc in self.processes.items() if proc.info.role == "main"
                 and proc.info.ppid not in self.processes]
        if any(pid in self.interrupted_by_gpudoctor for pid in roots):
            session.interrupted_by_gpudoctor = True
        if self.agent_errors:
            session.notes.extend(f"agent: {msg}" for msg in self.agent_errors[:10])
        if self.errors_dropped:
            session.notes.append(f"{self.errors_dropped} more uncaught exceptions were not kept "
                                 f"(the first {ERRORS_MAX} are)")
        if self.malformed_lines:
            session.notes.append(f"{self.malformed_lines} unreadable event lines were skipped")

    def _apply_loaders(self, session: Session) -> None:
        for proc in self.processes.values():
            for loader_id, values in proc.loader_stats.items():
                loader = self.loaders.get(loader_id)
                if loader is not None:
                    _apply_loader_stats(loader, values)
        for pid, proc in self.processes.items():
            for key, values in proc.fetch.items():
                batches, wall, cpu = values[:3]
                runqueue = values[3] if len(values) > 3 else None
                fetched_for = key if key in self.loaders else self.worker_to_loader.get(pid)
                loader = self.loaders.get(fetched_for) if fetched_for else None
                if loader is None:
                    continue
                first = loader.fetch_batches == 0
                loader.fetch_batches += int(batches)
                loader.fetch_wall_s += float(wall)
                loader.fetch_cpu_s += float(cpu)
                if runqueue is None:
                    loader.fetch_runqueue_s = None
                elif first or loader.fetch_runqueue_s is not None:
                    loader.fetch_runqueue_s = (loader.fetch_runqueue_s or 0.0) + float(runqueue)
                if pid != loader.pid and pid not in loader.worker_pids:
                    loader.worker_pids.append(pid)
        for pid, proc in self.processes.items():
            if proc.fetch_profile is None:
                continue
            profiled = proc.fetch_profile_loader if proc.fetch_profile_loader in self.loaders \
                else self.worker_to_loader.get(pid)
            if profiled is not None and profiled in self.loaders:
                self.loaders[profiled].fetch_profile = proc.fetch_profile
        session.loaders = sorted(self.loaders.values(), key=lambda lo: lo.loader_id)
        if not session.loaders:
            session.unavailable.setdefault("loader", "no DataLoader was iterated")
        main = max(session.loaders, key=lambda lo: lo.batches, default=None)
        if main is not None and main.batch_size and session.batch_size is None:
            session.batch_size = main.batch_size

    def _apply_steps(self, session: Session) -> None:
        best = self.primary()
        if best is None:
            session.unavailable.setdefault("steps", "no step boundaries seen (no gpudoctor.step(), optimizer.step(), "
                                                    "backward(), DataLoader batch or module forward)")
            return
        pid, source = best
        if source == "forward":
            session.notes.append(
                f"steps are the outermost forwards of {self.processes[pid].forward_root or 'a module'} (no "
                "gpudoctor.step(), optimizer, backward() or DataLoader marked them)")
        session.steps, left_out = self.steps_of(pid, source)
        if left_out:
            windows = f"the profiler window{'s' if len(self.profiles) > 1 else ''}"
            if self._fetch_profile_spans(pid):
                windows = f"{windows} or the DataLoader's profiled batches" if self.profiles else \
                    "the DataLoader's profiled batches"
            session.notes.append(f"{left_out} steps inside {windows} are left out of step statistics")

    def _fetch_profile_spans(self, pid: int | None = None) -> list[tuple[float, float]]:
        """When cProfile ran around the fetches of the process that steps (num_workers=0: its
        batches are made in series with its steps, which it slowed), in session seconds. A worker's
        profile is left alone: the other workers and the prefetch queue hide most of it, and its
        span would cost a short run most of its steady steps."""
        return [(fp.t_start, fp.t_end) for p, proc in self.processes.items() if (fp := proc.fetch_profile) is not None
                and (pid is None or p == pid) and fp.worker is None
                and fp.t_start is not None and fp.t_end is not None and fp.t_end >= fp.t_start]

    def steps_of(self, pid: int, source: str) -> tuple[Steps, int]:
        """One process's steps of one source, without those inside its profiler windows or while a
        loader process's fetches were profiled; and how many were left out."""
        data = self.processes[pid].steps[source]
        records = data.records
        # steps inside the profiler windows run slower (tracing, stack capture): keep them out, and
        # those just after (the trace's export and the profiler's teardown land there): up to
        # 0.5 s, at most AFTER_WINDOW_STEPS median steps (a loop of 1 ms steps would lose 500)
        left_out, left_out_s = 0, 0.0
        after = min(AFTER_WINDOW_S, AFTER_WINDOW_STEPS * statistics.median(r.duration_s for r in records)) \
            if records else 0.0
        spans = [(float(p["t_start"]) - self.t0, float(p["t_end"]) - self.t0) for p in self.profiles
                 if p.get("pid") == pid and p.get("t_start") and p.get("t_end")]
        # and each step counted before a window (agent/profiler.StepCount: counting slowed it), the one
        # record that holds the middle of its span
        middles = [c[0] + c[1] / 2 for p in self.profiles if p.get("pid") == pid
                   and (c := counted_step(p, self.t0)) is not None]
        bounds = [(lo, hi + after) for lo, hi in spans + self._fetch_profile_spans(pid)] + [(m, m) for m in middles]
        for lo, hi in bounds:
            kept = [r for r in records if not (lo <= r.t and r.t - r.duration_s <= hi)]
            if len(kept) >= 3 and len(kept) < len(records):
                left_out += len(records) - len(kept)
                left_out_s += sum(r.duration_s for r in records) - sum(r.duration_s for r in kept)
                records = kept
        steps = Steps(
            source=source,
            count=data.count + 1,  # the first boundary opens step 1 without a record
            records=records,
            aggregated=data.aggregated,
            warmup_steps=min(WARMUP_STEPS, max(0, len(data.records) - 3)),
            last_step_t=round(data.last_t, 3) if data.last_t is not None else None,
            profiled_steps=left_out,
            profiled_time_s=round(left_out_s, 6),
        )
        return steps, left_out


# precedence of the step sources (gpudoctor/agent/stats.py says why this order)
_SOURCE_RANK = {"explicit": 5, "optimizer": 4, "backward": 3, "loader": 2, "forward": 1}

# The last argument is the event as JSON gave it (Any here): each handler declares the kind's
# TypedDict (gpudoctor/agent/protocol.py), which is what the agent's Agent.emit overloads check
# on the other side. A file of another process (another gpudoctor version) may still hold
# anything: handlers convert what they read, and _read counts what they cannot.
_Handler = Callable[[EventReader, int, _ProcessState, float, Any], None]

# event kind -> its handler; kinds not listed (from a newer agent, or "fetch_profile_request",
# which only the agents read) are read and ignored
_HANDLERS: dict[str, _Handler] = {
    "hello": EventReader._on_hello,
    "dist": EventReader._on_dist,
    "process": EventReader._on_process,
    "torch": EventReader._on_torch,
    "step": EventReader._on_step,
    "steps_agg": EventReader._on_steps_agg,
    "loader": EventReader._on_loader,
    "loader_workers": EventReader._on_loader_workers,
    "loader_stats": EventReader._on_loader_stats,
    "fetch": EventReader._on_fetch,
    "fetch_profile": EventReader._on_fetch_profile,
    "forward_root": EventReader._on_forward_root,
    "exception": EventReader._on_exception,
    "oom": EventReader._on_oom,
    "oom_observed": EventReader._on_oom_observed,
    "interrupt": EventReader._on_interrupt,
    "alloc": EventReader._on_alloc,
    "cuda": EventReader._on_cuda,
    "profile": EventReader._on_profile,
    "override": EventReader._on_override,
    "bye": EventReader._on_bye,
    "agent_error": EventReader._on_agent_error,
    "write": EventReader._on_write,
}


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and str(value).strip() != "" else None
    except (TypeError, ValueError):
        return None


def _pid_from_name(name: str) -> int:
    try:
        return int(name[len("events-"):-len(".jsonl")])
    except ValueError:
        return -1


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, not ours to signal
    return True
