"""Assemble the Session from what a `diagnose` run recorded.

The supervisor (supervisor.py) runs the workload and samples it; this module turns its
samplers' results and the agents' event files into one Session. A distributed job
(torchrun, torch.multiprocessing.spawn) has one agent per rank: the Session's own steps,
loaders and profiler windows describe the primary rank, and `Session.ranks` holds every
rank's numbers for the multi-GPU checks (GD5xx).

Why rank 0 is the primary view, not the worst rank: the single-GPU checks then read the
same process from run to run (the worst rank changes with noise), rank 0 is the process
users log from, and in data-parallel training every rank waits for the slowest at each
all-reduce, so rank 0's step time already carries a straggler's cost. The straggler
itself, with its cause, is GD501's finding.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import platform
import socket
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from gpudoctor import __version__
from gpudoctor.agent.redact import env_secrets, redact_argv, redact_text
from gpudoctor.collectors.cpu import CpuSampler, cpu_info
from gpudoctor.collectors.events import EventReader
from gpudoctor.collectors.windows import apply_windows, rank_window
from gpudoctor.metrics import UnprofiledSteps
from gpudoctor.run.gpu_monitor import GpuMonitor
from gpudoctor.run.process_tree import leftover_note, none_instrumented
from gpudoctor.session import Environment, RankInfo, ReplaySummary, Session, StorageProbe

log = logging.getLogger(__name__)


@dataclass
class Recorded:
    """What the supervisor holds when the workload has ended."""

    command: list[str]
    t0: float
    workdir: Path
    cwd: str  # where the workload started (read then: the directory may be gone by the end)
    reader: EventReader
    started_at: datetime.datetime
    duration_s: float
    returncode: int | None
    running_pid: int | None  # the workload's pid while it still runs (cgroup/affinity are read there)
    stop_reason: str | None
    stop_requested_s: float | None
    escalated: list[str] = field(default_factory=list)
    grace_s: float = 10.0
    leftovers: list[str] = field(default_factory=list)
    uninstrumented: dict[int, str] = field(default_factory=dict)
    storage: dict[str, StorageProbe] = field(default_factory=dict)
    cpu_sampler: CpuSampler | None = None
    gpu_result: object = None


def assemble(run: Recorded) -> tuple[Session, str | None]:
    """The Session, and the primary profiler window's trace file name (in the workdir)."""
    code = run.returncode
    if code is not None and code < 0:
        code = 128 - code
    session = Session(
        tool_version=__version__,
        command=redact_argv(run.command, env_secrets(os.environ)),
        cwd=run.cwd,
        started_at=run.started_at.isoformat(timespec="seconds"),
        duration_s=round(run.duration_s, 3),
        exit_code=code,
        stop_reason=run.stop_reason or "exited",
        source="diagnose",
        environment=Environment(
            python=platform.python_version(),
            platform=platform.platform(),
            hostname=socket.gethostname(),
            cpu=cpu_info(run.running_pid),
            host_memory_total_bytes=psutil.virtual_memory().total,
        ),
    )
    reader = run.reader
    reader.apply(session)
    _redact_errors(session)
    session.stop_requested_s = run.stop_requested_s
    _notes(run, session)
    sampler = run.cpu_sampler
    if sampler is not None:
        session.cpu_samples = sampler.samples
        session.cpu_sample_interval_s = sampler.effective_interval_s
        if sampler.error and not sampler.samples:
            session.unavailable["cpu"] = f"CPU sampling failed: {sampler.error}"
    if not session.cpu_samples:
        session.unavailable.setdefault("cpu", "the run was too short for CPU samples")
    session.storage = list(run.storage.values())
    if not session.storage:
        session.unavailable.setdefault("storage", "no dataset path known (pass --data PATH to name it)")
    GpuMonitor.apply(run.gpu_result, session)
    primary_trace = apply_windows(reader.profiles, run.workdir, session, run.t0, pid=reader.primary_pid(),
                                  replay=replay_window)
    if session.allocator == []:
        session.unavailable.setdefault("allocator", "the workload did not use the CUDA caching allocator")
    if reader.processes and not reader.torch_versions:
        why = "the workload never imported torch (not installed in its interpreter, or not a PyTorch program)"
        for fact in ("loader", "steps", "profile", "allocator"):
            session.unavailable[fact] = why
    assemble_ranks(reader, session, run.workdir, run.t0)
    return session, primary_trace


def replay_window(events: Any, steps: int, source: str | None,
                  unprofiled: UnprofiledSteps | None) -> ReplaySummary | None:
    """One profiled window replayed (gpudoctor.replay), for apply_windows: the assembly starts the
    replay, the collectors below it only summarise. Imported on first use, once the collectors
    have found the trace analysis's dependencies installed."""
    from gpudoctor.replay import replay_or_error

    return replay_or_error(events, steps, unprofiled, source=source)


def assemble_ranks(reader: EventReader, session: Session, workdir: Path, t0: float) -> None:
    """`Session.ranks`: one entry per rank of a distributed job (none for a one-process run)."""
    ranks = reader.ranks()
    if not ranks:
        return
    host = session.environment.hostname
    index_of = {gpu.uuid: gpu.index for gpu in session.environment.gpus}
    for rank, pid in ranks.items():
        state = reader.processes[pid]
        info = RankInfo(
            rank=rank, pid=pid, host=host,
            local_rank=state.env_local_rank,
            world_size=state.dist_world_size or state.env_world_size,
            local_world_size=state.env_local_world_size,
            backend=state.backend, device_uuids=list(state.info.device_uuids),
        )
        best = reader.best_source(pid)
        if best is not None:
            info.steps, _ = reader.steps_of(pid, best[1])
        loaders = [lo for lo in session.loaders if lo.pid == pid]
        info.loader_ids = [lo.loader_id for lo in loaders]
        if loaders:
            info.loader_wait_s = round(sum(lo.wait_total_s for lo in loaders), 6)
            info.loader_workers = max(loaders, key=lambda lo: lo.batches).num_workers
        _gpu_activity(info, session, [index_of[u] for u in info.device_uuids if u in index_of])
        if rank == min(ranks):  # the primary window is in full in Session.profile: its totals suffice here
            info.profile = None if session.profile is None else dataclasses.replace(
                session.profile, call_sites=[], top_cpu_ops=[], sync_sites=[], replay=None)
        else:
            info.profile = rank_window(reader.profiles, workdir, pid, t0, session.steps.source)
        error = next((e for e in session.errors if e.pid == pid), None)
        if error is not None:
            info.error = f"{error.type or error.kind}: {error.message}"[:300]
        session.ranks.append(info)
    session.primary_rank = min(ranks)
    session.job_id = next((reader.processes[pid].job_id for pid in ranks.values()
                           if reader.processes[pid].job_id), None)
    if len(ranks) > 1:
        session.notes.append(f"a distributed job: {len(ranks)} ranks recorded; steps, loaders and the profiler "
                             f"window are rank {session.primary_rank}'s, every rank's numbers are in `ranks`")


def _gpu_activity(info: RankInfo, session: Session, indices: list[int]) -> None:
    """Mean utilization and SM activity of the rank's GPU(s) while it stepped.

    A sample at t reads the period since the one before, (t - interval, t]: the samples whose
    period overlaps the steps count, so steps shorter than the interval still get the one after them."""
    if not indices or not session.gpu_samples:
        return
    records = info.steps.records
    low = records[0].t - records[0].duration_s if records else None
    high = records[-1].t if records else None
    interval = session.gpu_sample_interval_s or 0.0
    samples = [s for s in session.gpu_samples if s.gpu_index in indices
               and (low is None or high is None or low <= s.t <= high + interval)]
    utils = [s.util_percent for s in samples if s.util_percent is not None]
    sm = [s.sm_activity for s in samples if s.sm_activity is not None]
    info.gpu_util_percent = round(statistics.fmean(utils), 2) if utils else None
    info.gpu_sm_activity_percent = round(statistics.fmean(sm), 2) if sm else None


def _notes(run: Recorded, session: Session) -> None:
    reader = run.reader
    if run.escalated:
        session.notes.append(
            f"the workload did not stop within {run.grace_s:g}s of SIGINT; gpudoctor sent "
            f"{' then '.join(dict.fromkeys(run.escalated))}: its last events may be missing")
    if run.leftovers:
        session.notes.append(leftover_note(run.leftovers))
    missed = [why for pid, why in run.uninstrumented.items() if pid not in reader.processes]
    if missed and reader.processes:
        session.notes.append(
            f"{len(missed)} Python process(es) of the command ran without gpudoctor's agent, so their "
            "DataLoaders, steps and errors are not in this report: " + "; ".join(missed[:5]))
    if not reader.processes:
        why = none_instrumented(run.uninstrumented)
        session.notes.append(why)
        session.unavailable.setdefault("loader", why)
        session.unavailable.setdefault("steps", why)


def _redact_errors(session: Session) -> None:
    """Defence in depth: secret values of the environment in error text (the agent masks
    them at the source; an agent_error or an older agent may not have)."""
    secrets = env_secrets(os.environ)
    for error in session.errors:
        error.message = redact_text(error.message, secrets)
        if error.traceback:
            error.traceback = redact_text(error.traceback, secrets)
