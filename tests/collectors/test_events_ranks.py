"""Ranks from the agents' events: torchrun's launcher is no rank, the process group's word wins."""

from __future__ import annotations

import json
from pathlib import Path

from gpudoctor.collectors.events import EventReader
from gpudoctor.run.assemble import assemble_ranks
from gpudoctor.session import Environment, GpuInfo, GpuSample, Session


def write(tmp_path: Path, pid: int, events: list[dict]) -> None:
    (tmp_path / f"events-{pid}.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")


def hello(pid: int, ppid: int, **env: str | None) -> dict:
    return {"k": "hello", "ts": 1.0, "pid": pid, "ppid": ppid, "argv": ["train.py"], **env}


def steps(n: int, duration: float, backward: float | None = None, start: float = 2.0) -> list[dict]:
    out = []
    for i in range(n):
        event = {"k": "step", "ts": start + (i + 1) * duration, "src": "optimizer", "n": i + 2, "dur": duration,
                 "wait": 0.001}
        if backward is not None:
            event["bwd"] = backward
        out.append(event)
    return out


def torchrun_job(tmp_path: Path, slow_rank: int = 1) -> None:
    # the launcher (pid 10) imports torch but never steps and has no RANK
    write(tmp_path, 10, [hello(10, 1), {"k": "torch", "ts": 1.1, "version": "2.13.0"}])
    for rank in (0, 1):
        env = {"rank": str(rank), "local_rank": str(rank), "world_size": "2", "local_world_size": "2",
               "job_id": "abc"}
        backward = 0.005 if rank == slow_rank else 0.035
        write(tmp_path, 20 + rank, [hello(20 + rank, 10, **env), {"k": "torch", "ts": 1.2, "version": "2.13.0"},
                                    {"k": "dist", "ts": 1.5, "rank": rank, "world_size": 2, "backend": "gloo"},
                                    *steps(12, 0.04, backward)])


def test_ranks_come_from_the_workers_not_the_launcher(tmp_path):
    torchrun_job(tmp_path)
    reader = EventReader(tmp_path, 0.0)
    reader.poll()
    assert reader.ranks() == {0: 20, 1: 21}
    assert reader.rank_of(10) is None
    assert reader.primary() == (20, "optimizer")  # the primary view is rank 0's
    session = Session(environment=Environment(hostname="node0"))
    reader.apply(session)
    assert {p.pid: p.rank for p in session.processes} == {10: None, 20: 0, 21: 1}
    assert session.steps.records[0].backward_s == 0.035
    assemble_ranks(reader, session, tmp_path, 0.0)
    assert [(r.rank, r.pid, r.host, r.backend, r.world_size, r.local_world_size) for r in session.ranks] == [
        (0, 20, "node0", "gloo", 2, 2), (1, 21, "node0", "gloo", 2, 2)]
    assert session.job_id == "abc" and session.primary_rank == 0
    assert len(session.ranks[1].steps.records) == 12


def test_a_rank_variable_alone_does_not_make_a_rank(tmp_path):
    # RANK exported in a shell that runs a one-process script which never steps: no rank
    write(tmp_path, 30, [hello(30, 1, rank="0", world_size="1")])
    reader = EventReader(tmp_path, 0.0)
    reader.poll()
    assert reader.ranks() == {}


def test_spawned_ranks_are_known_from_their_process_group(tmp_path):
    # torch.multiprocessing.spawn sets no RANK: the process group says which rank each child is
    write(tmp_path, 40, [hello(40, 1)])
    for rank in (0, 1):
        write(tmp_path, 41 + rank, [hello(41 + rank, 40), {"k": "dist", "ts": 1.5, "rank": rank, "world_size": 2,
                                                           "backend": "gloo"}, *steps(5, 0.04)])
    reader = EventReader(tmp_path, 0.0)
    reader.poll()
    assert reader.ranks() == {0: 41, 1: 42}


def test_a_rank_claimed_twice_keeps_the_process_in_the_group(tmp_path):
    write(tmp_path, 50, [hello(50, 1, rank="0", world_size="2"), *steps(3, 0.04)])
    write(tmp_path, 51, [hello(51, 1, rank="0", world_size="2"),
                         {"k": "dist", "ts": 1.5, "rank": 0, "world_size": 2, "backend": "gloo"}, *steps(2, 0.04)])
    reader = EventReader(tmp_path, 0.0)
    reader.poll()
    assert reader.ranks() == {0: 51}


def test_a_rank_whose_steps_end_within_one_sample_interval_gets_the_sample_after_them(tmp_path):
    """An NVML sample reads the period since the one before: 12 steps of 10 ms between two samples
    0.5 s apart are measured by the second one (none fell inside them: the rank said nothing)."""
    env = {"rank": "0", "local_rank": "0", "world_size": "1", "local_world_size": "1"}
    write(tmp_path, 20, [hello(20, 10, **env), {"k": "torch", "ts": 1.2, "version": "2.13.0"},
                         {"k": "cuda", "ts": 1.3, "devices": [{"index": 0, "uuid": "GPU-a"}]},
                         {"k": "dist", "ts": 1.5, "rank": 0, "world_size": 1, "backend": "nccl"},
                         *steps(12, 0.01, start=2.0)])
    reader = EventReader(tmp_path, 0.0)
    reader.poll()
    session = Session(environment=Environment(hostname="node0", gpus=[GpuInfo(0, "GPU-a", "H200")]),
                      gpu_sample_interval_s=0.5,
                      gpu_samples=[GpuSample(1.9, 0, util_percent=0.0, sm_activity=0.0),
                                   GpuSample(2.45, 0, util_percent=80.0, sm_activity=60.0),
                                   GpuSample(2.95, 0, util_percent=0.0, sm_activity=0.0)])
    reader.apply(session)
    assemble_ranks(reader, session, tmp_path, 0.0)
    (rank,) = session.ranks
    assert rank.gpu_util_percent == 80.0 and rank.gpu_sm_activity_percent == 60.0
