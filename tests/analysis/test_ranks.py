"""Cross-rank analysis (gpudoctor/analysis/ranks.py) and the GD5xx checks on synthetic Sessions."""

from __future__ import annotations

from helpers import make_loader, make_session, make_steps, run_check

from gpudoctor.analysis import ranks
from gpudoctor.analysis.input_pipeline import ranks_with_loaders
from gpudoctor.checks import (
    gd501_straggler,
    gd502_communication,
    gd503_gpu_imbalance,
    gd504_rank_starved,
)
from gpudoctor.session import ProfileSummary, RankInfo, StepRecord, Steps


def _steps(n: int, duration: float, backward: float | None, wait: float = 0.0) -> Steps:
    records = [StepRecord(t=0.1 * (i + 1), duration_s=duration, data_wait_s=wait, backward_s=backward)
               for i in range(n)]
    return Steps(source="optimizer", count=n + 1, records=records, warmup_steps=2)


def _job(*rows: tuple[float, float | None, float], **fields) -> list[RankInfo]:
    """One RankInfo per (step time, backward time, data wait) row."""
    return [RankInfo(rank=i, pid=100 + i, host="node0", world_size=len(rows), local_world_size=len(rows),
                     backend="gloo", steps=_steps(20, step, backward, wait), **fields)
            for i, (step, backward, wait) in enumerate(rows)]


def _session(rank_infos: list[RankInfo], **fields):
    return make_session(steps=make_steps(20, 0.1), ranks=rank_infos, primary_rank=0, **fields)


def test_straggler_is_the_rank_the_others_wait_for():
    # rank 2 spends 30 ms more outside backward(); ranks 0 and 1 wait for it inside backward()
    session = _session(_job((0.050, 0.045, 0.001), (0.050, 0.044, 0.001), (0.050, 0.015, 0.001)))
    found = ranks.straggler(session)
    assert found is not None
    assert found.rank.rank == 2
    assert abs(found.excess_s - 0.0295) < 1e-6
    assert found.cause == "host"
    assert found.consistent_share == 1.0
    outcome, findings = run_check(gd501_straggler.run.check, session)
    assert outcome.status == "finding"
    assert findings[0].evidence["rank"].value == 2
    assert findings[0].estimated_gain == round(0.050 / (0.050 - 0.0295), 3)
    assert ranks.worst_rank(session) == 2


def test_straggler_cause_is_data_when_its_loader_wait_explains_it():
    session = _session(_job((0.050, 0.045, 0.001), (0.050, 0.015, 0.031)))
    found = ranks.straggler(session)
    assert found is not None and found.rank.rank == 1 and found.cause == "data"
    starved = ranks.starved_ranks(session)
    assert [s.rank.rank for s in starved] == [1]
    outcome, findings = run_check(gd504_rank_starved.run.check, session)
    assert outcome.status == "finding" and findings[0].evidence["rank"].value == 1


def test_equal_ranks_have_no_straggler():
    session = _session(_job((0.050, 0.030, 0.001), (0.051, 0.031, 0.001), (0.050, 0.029, 0.001)))
    assert ranks.straggler(session) is None
    assert run_check(gd501_straggler.run.check, session)[0].status == "pass"
    assert run_check(gd504_rank_starved.run.check, session)[0].status == "pass"


def test_small_differences_are_noise():
    # 4 ms on a 50 ms step is 8%: under the 10% line
    assert ranks.straggler(_session(_job((0.050, 0.030, 0.0), (0.050, 0.026, 0.0)))) is None


def test_one_slow_step_is_not_consistent():
    rows = _job((0.050, 0.040, 0.0), (0.050, 0.040, 0.0))
    rows[1].steps.records[5].backward_s = 0.0  # a single step of 50 ms own time
    assert ranks.straggler(_session(rows)) is None


def test_without_backward_times_step_times_are_compared():
    # no backward() seen (an older agent, or a loop without autograd): step time is the own time
    session = _session(_job((0.050, None, 0.0), (0.080, None, 0.0)))
    found = ranks.straggler(session)
    assert found is not None and found.rank.rank == 1


def test_multi_rank_checks_skip_with_reasons():
    single = make_session(steps=make_steps(20, 0.1))
    for check in (gd501_straggler.run.check, gd503_gpu_imbalance.run.check, gd504_rank_starved.run.check):
        outcome, _ = run_check(check, single)
        assert outcome.status == "skipped"
    assert "not a distributed job" in run_check(gd501_straggler.run.check, single)[0].reason
    one = _session(_job((0.05, 0.01, 0.0)))
    assert "one rank only" in run_check(gd501_straggler.run.check, one)[0].reason
    gloo = _session(_job((0.05, 0.01, 0.0), (0.05, 0.01, 0.0)))
    outcome, _ = run_check(gd502_communication.run.check, gloo)
    assert outcome.status == "skipped" and "gloo" in outcome.reason


def _comm_profile(comm_us: float, overlap_us: float, window_s: float = 0.1) -> ProfileSummary:
    return ProfileSummary(steps=10, window_s=window_s, kernel_count=100, comm_kernel_count=20,
                          comm_us=comm_us, comm_overlap_us=overlap_us)


def test_exposed_communication_is_a_finding():
    rows = _job((0.05, 0.01, 0.0), (0.05, 0.01, 0.0))
    for info in rows:
        info.backend = "nccl"
        info.profile = _comm_profile(30_000, 6_000)  # 30% of the window, a fifth of it overlapped
    session = _session(rows)
    comm = ranks.communication(session)
    assert comm is not None
    assert abs(comm.comm_share - 0.3) < 1e-9 and abs(comm.overlap - 0.2) < 1e-9
    assert abs(comm.exposed_share - 0.24) < 1e-9
    outcome, findings = run_check(gd502_communication.run.check, session)
    assert outcome.status == "finding"
    assert findings[0].estimated_gain == round(1 / 0.76, 3)


def test_overlapped_communication_passes():
    rows = _job((0.05, 0.01, 0.0), (0.05, 0.01, 0.0))
    for info in rows:
        info.backend = "nccl"
        info.profile = _comm_profile(30_000, 28_000)
    assert run_check(gd502_communication.run.check, _session(rows))[0].status == "pass"


def test_gpu_activity_imbalance():
    rows = _job((0.05, 0.01, 0.0), (0.05, 0.01, 0.0))
    rows[0].gpu_sm_activity_percent, rows[1].gpu_sm_activity_percent = 85.0, 40.0
    session = _session(rows, torch_cuda_used=True)
    outcome, findings = run_check(gd503_gpu_imbalance.run.check, session)
    assert outcome.status == "finding"
    assert findings[0].evidence["idlest_rank"].value == 1
    assert findings[0].evidence["spread"].value == 45.0
    rows[1].gpu_sm_activity_percent = 80.0
    assert run_check(gd503_gpu_imbalance.run.check, session)[0].status == "pass"


def test_cores_are_divided_by_the_ranks_on_the_node():
    # 4 ranks on the node, only rank 0's loader recorded: the node's cores are still shared by 4
    session = _session(_job(*[(0.05, 0.01, 0.0)] * 4), loaders=[make_loader(num_workers=2, pid=100)])
    assert ranks_with_loaders(session) == 4
    assert ranks.ranks_per_node(session) == 4
    # a one-process run: as before, the processes with loaders
    assert ranks_with_loaders(make_session(loaders=[make_loader(pid=1), make_loader(pid=2)])) == 2
