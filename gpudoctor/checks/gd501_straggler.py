"""GD501 straggler: one rank's own work per step stays above the others'.

What it detects
    In a distributed job (torchrun, torch.multiprocessing.spawn), one rank whose time
    per step outside the gradient all-reduce is consistently longer than the other
    ranks'. Every rank waits for it at each all-reduce, so the whole job runs at its
    speed. The finding names the rank, its host, and the cause found on it: a slower
    input pipeline (its data wait accounts for the extra time) or slower work in the
    loop itself (forward, optimizer, Python work only that rank does).

Why it matters
    Synchronous data parallelism is as fast as its slowest rank: one rank 30% slower
    makes all N GPUs 30% slower.

How it is measured
    The agent in every rank records each step's time, its data wait, and the time
    spent inside backward(), where DDP's all-reduce waits for the slowest peer. Own
    time = step time - backward time; medians over steady steps are compared
    (gpudoctor/analysis/ranks.py explains the method).

Thresholds, and where they come from
    Own time above the other ranks' median by 10% of the step time (and at least 2 ms)
    in 60% of the rank's steady steps (gpudoctor/analysis/ranks.py says why).
    Estimated gain: step time / (step time - excess), the speed-up if the rank kept up.

What to do
    Look at what only that rank does (rank-0 logging, evaluation, checkpointing inside the
    loop), give its DataLoader the same workers as the others, and check its GPU and host
    (GD203 clocks, other jobs on that node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis import ranks
from gpudoctor.model import Evidence, Finding, Remedy, Skip, check

if TYPE_CHECKING:
    from gpudoctor.session import Session


@check("GD501", "straggler", stage=5, title="A straggling rank holds the job back",
       requires=("steps",), thresholds=ranks.STRAGGLER_LIMITS)
def run(session: Session) -> list[Finding]:
    why = ranks.why_not_comparable(session)
    if why:
        raise Skip(why)
    found = ranks.straggler(session)
    if found is None:
        return []
    rank = found.rank
    window = f"steady steps of {len(session.ranks)} ranks"
    where = f" on {rank.host}" if rank.host else ""
    waits = ("" if found.others_backward_s is None else
             f"; the other ranks wait for it inside backward() ({found.others_backward_s * 1e3:.1f} ms per step)")
    gain = found.job_step_s / max(found.job_step_s - found.excess_s, 1e-9)
    return [Finding(
        severity="warning",
        title=f"Rank {rank.rank} is a straggler: every rank waits for it",
        message=(f"Rank {rank.rank}{where} spends {(rank.own_s or 0) * 1e3:.1f} ms per step on its own work, "
                 f"{found.excess_s * 1e3:.1f} ms more than the other ranks ({found.others_own_s * 1e3:.1f} ms), "
                 f"in {found.consistent_share:.0%} of its steps{waits}. Cause found on it: {found.cause_text}."),
        evidence={
            "rank": Evidence(rank.rank, label="straggling rank"),
            "own_time": Evidence(round((rank.own_s or 0) * 1e3, 3), "ms", window, "its time outside backward()"),
            "others_own_time": Evidence(round(found.others_own_s * 1e3, 3), "ms", window, "the other ranks'"),
            "excess": Evidence(round(found.excess_s * 1e3, 3), "ms", window, "extra per step"),
            "step_time": Evidence(round(found.job_step_s * 1e3, 3), "ms", window, "job step time"),
            "consistent_share": Evidence(round(found.consistent_share, 3), None, window, "share of its steps slower"),
            "cause": Evidence(found.cause, label="cause on that rank"),
        },
        remedy=Remedy(
            text=("Give that rank the same input pipeline as the others (workers, storage) and move rank-only "
                  "work (logging, evaluation, checkpoints) out of the step or to a background thread."),
            code=("if dist.get_rank() == 0 and step % 100 == 0:   # not every step\n"
                  "    log_metrics(loss.item())"),
        ),
        estimated_gain=round(gain, 3),
    )]

