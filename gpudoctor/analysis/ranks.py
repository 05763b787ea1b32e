"""Across the ranks of a distributed job: pure functions over `Session.ranks`.

The multi-GPU checks (GD501-GD504) only turn these numbers into findings.

How a straggler shows. In data-parallel training (DDP, FSDP) every rank joins the
gradient all-reduce once per step, inside ``backward()``; nobody leaves it before the
slowest rank arrived. So step *times* are equal on all ranks (each step ends when the
collective does), and a slow rank shows as the others *waiting*: their time inside
``backward()`` grows by what the slow rank spends on its own work. Each rank's **own
time** per step = step time - time inside backward() (data wait, forward, optimizer,
host work); the straggler is the rank whose own time stays above the others'. Without
backward times (an older agent, no backward), step time is used instead (a
pipeline or a loop without a collective).

Thresholds, and where they come from:
- ``STRAGGLER_EXCESS = 0.10``: a rank is a straggler when its median own time exceeds
  the median of the other ranks' by 10% of the job's step time or more. The design's
  data-wait line (5% of a step is worth a finding, TensorBoard profiler plugin) is the
  floor for "worth a finding"; rank-to-rank noise on identical hardware is of the same
  order, so twice that line keeps noise out. ``STRAGGLER_MIN_S = 2 ms`` keeps
  microsecond loops out.
- ``CONSISTENT_SHARE = 0.6``: "consistently" = in at least 60% of its steady steps
  the rank's own time is above the others' median by that excess (one slow step, a
  checkpoint or a GC pause, is not a straggler).
- ``DATA_WAIT_SHARE = 0.05``: a rank's input pipeline starves when its loop waits for
  data 5% of the step or more (the design's data-wait threshold), while the others'
  median stays below it and below half of it.
- ``EXPOSED_COMM_SHARE = 0.10``: communication not hidden behind compute for 10% of
  the step or more is worth a finding (twice the 5% line, as above).
- ``ACTIVITY_SPREAD = 20`` percentage points of GPU activity between the busiest and
  the idlest rank: a sample every 0.5 s over a few seconds varies by several points
  on equal loads; 20 is well outside that.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:
    from gpudoctor.session import RankInfo, Session

STRAGGLER_EXCESS = Threshold("a rank's own time above the others' median, share of the step", 0.10, "share",
                             "twice the 5% data-wait line of the design: outside scheduling noise")
STRAGGLER_MIN_S = Threshold("a rank's own time above the others' median, at least", 0.002, "s",
                            "keeps microsecond loops out")
CONSISTENT_SHARE = Threshold("steady steps a straggler is slow in", 0.6, "share",
                             "one slow step (a checkpoint, a GC pause) is not a straggler")
DATA_WAIT_SHARE = Threshold("a rank's data wait that starves it", 0.05, "share of step time",
                            "the design's data-wait threshold (GD102)")
EXPOSED_COMM_SHARE = Threshold("communication not overlapped with compute", 0.10, "share of step time",
                               "twice the 5% line, as for stragglers")
ACTIVITY_SPREAD = Threshold("GPU activity between the busiest and the idlest rank", 20.0, "percentage points",
                            "0.5 s samples over a few seconds vary by several points on equal loads")
STRAGGLER_LIMITS = (STRAGGLER_EXCESS, STRAGGLER_MIN_S, CONSISTENT_SHARE)
MIN_STEPS = 5  # steady steps a rank needs before it is compared


@dataclass(frozen=True)
class RankNumbers:
    """One rank's steady-state numbers (None: not measured, see `Session.ranks`)."""

    rank: int
    host: str | None
    steps: int  # steady steps measured
    step_s: float | None  # median step time
    own_s: float | None  # median time outside backward() (step time without backward times)
    backward_s: float | None  # median time inside backward(); None when not seen
    data_wait_share: float | None  # of the step time
    gpu_busy_percent: float | None  # SM activity where measured, else utilization
    comm_share: float | None  # NCCL kernel time / window; None without NCCL kernels
    comm_overlap: float | None  # share of it that ran while compute kernels ran
    own_times: tuple[float, ...] = ()


def rank_numbers(info: RankInfo) -> RankNumbers:
    records = info.steps.records[info.steps.warmup_steps:]
    durations = [r.duration_s for r in records]
    with_backward = [r for r in records if r.backward_s is not None]
    own: list[float] = []
    if records and len(with_backward) == len(records):
        own = [max(0.0, r.duration_s - (r.backward_s or 0.0)) for r in records]
    total = sum(durations)
    wait = sum(min(r.data_wait_s, r.duration_s) for r in records)
    profile = info.profile
    comm_share = comm_overlap = None
    if profile is not None and profile.comm_kernel_count and profile.window_s > 0:
        comm_share = profile.comm_us / (profile.window_s * 1e6)
        comm_overlap = profile.comm_overlap_us / profile.comm_us if profile.comm_us > 0 else None
    busy = info.gpu_sm_activity_percent if info.gpu_sm_activity_percent is not None else info.gpu_util_percent
    return RankNumbers(
        rank=info.rank, host=info.host, steps=len(records),
        step_s=statistics.median(durations) if durations else None,
        own_s=statistics.median(own) if own else (statistics.median(durations) if durations else None),
        backward_s=statistics.median([r.backward_s or 0.0 for r in with_backward]) if with_backward else None,
        data_wait_share=wait / total if total > 0 else None,
        gpu_busy_percent=busy, comm_share=comm_share, comm_overlap=comm_overlap,
        own_times=tuple(own or durations),
    )


def all_ranks(session: Session) -> list[RankNumbers]:
    return [rank_numbers(info) for info in sorted(session.ranks, key=lambda r: r.rank)]


def why_not_comparable(session: Session) -> str | None:
    """None when the ranks can be compared, else why not (a check's skip reason)."""
    if not session.ranks:
        return "not a distributed job (no torch.distributed ranks were recorded)"
    if len(session.ranks) < 2:
        return f"one rank only (world size {session.ranks[0].world_size or 1}): nothing to compare"
    measured = [n for n in all_ranks(session) if n.steps >= MIN_STEPS]
    if len(measured) < 2:
        return f"fewer than two ranks with {MIN_STEPS} steady steps or more"
    return None


@dataclass(frozen=True)
class Straggler:
    rank: RankNumbers
    others_own_s: float  # median of the other ranks' own time
    excess_s: float  # how much longer its own time is
    job_step_s: float  # median step time over the ranks
    consistent_share: float  # of its steps above the others by the excess threshold
    cause: str  # data | host
    cause_text: str
    others_backward_s: float | None


def straggler(session: Session) -> Straggler | None:
    """The rank that holds the others back, or None (see the module's thresholds)."""
    ranks = [n for n in all_ranks(session) if n.steps >= MIN_STEPS and n.own_s is not None]
    if len(ranks) < 2:
        return None
    job_step = statistics.median([n.step_s for n in ranks if n.step_s is not None])
    worst = max(ranks, key=lambda n: n.own_s or 0.0)
    others = [n for n in ranks if n.rank != worst.rank]
    others_own = statistics.median([n.own_s or 0.0 for n in others])
    excess = (worst.own_s or 0.0) - others_own
    threshold = max(STRAGGLER_EXCESS * job_step, STRAGGLER_MIN_S)
    if excess < threshold:
        return None
    consistent = sum(1 for t in worst.own_times if t - others_own >= threshold) / max(1, len(worst.own_times))
    if consistent < CONSISTENT_SHARE:
        return None
    others_wait = statistics.median([(n.data_wait_share or 0.0) * (n.step_s or 0.0) for n in others])
    worst_wait = (worst.data_wait_share or 0.0) * (worst.step_s or 0.0)
    if worst_wait - others_wait >= 0.5 * excess:
        cause = "data"
        text = (f"its loop waits {worst_wait * 1e3:.1f} ms per step for data against {others_wait * 1e3:.1f} ms "
                "on the other ranks: its input pipeline is slower")
    else:
        cause = "host"
        text = ("the extra time is spent outside backward() and outside the DataLoader: its forward, "
                "optimizer or other Python work in the loop is slower (check what only that rank does: "
                "logging, evaluation, checkpointing, a slower GPU or CPU)")
    backwards = [n.backward_s for n in others if n.backward_s is not None]
    return Straggler(rank=worst, others_own_s=others_own, excess_s=excess, job_step_s=job_step,
                     consistent_share=consistent, cause=cause, cause_text=text,
                     others_backward_s=statistics.median(backwards) if backwards else None)


@dataclass(frozen=True)
class Communication:
    ranks: list[RankNumbers]  # those with NCCL kernels in their window
    comm_share: float  # mean over them
    overlap: float  # share of communication time hidden behind compute, mean
    exposed_share: float  # communication share of the window not overlapped


def communication(session: Session) -> Communication | None:
    """NCCL kernels in the ranks' profiled windows; None when there are none."""
    with_comm = [n for n in all_ranks(session) if n.comm_share is not None]
    if not with_comm:
        return None
    share = statistics.fmean([n.comm_share or 0.0 for n in with_comm])
    overlap = statistics.fmean([n.comm_overlap or 0.0 for n in with_comm])
    return Communication(ranks=with_comm, comm_share=share, overlap=overlap, exposed_share=share * (1 - overlap))


def why_no_communication(session: Session) -> str:
    backends = sorted({r.backend for r in session.ranks if r.backend})
    windows = sum(1 for r in session.ranks if r.profile is not None)
    if backends and "nccl" not in backends:
        return (f"backend {', '.join(backends)}: collectives run on the CPU, so there are no NCCL kernels "
                "to measure")
    if not windows:
        return "no profiled window on any rank: no kernels to measure communication from"
    return "no NCCL kernels in the ranks' profiled windows"


@dataclass(frozen=True)
class Imbalance:
    busiest: RankNumbers
    idlest: RankNumbers
    spread: float  # percentage points


def activity_imbalance(session: Session) -> Imbalance | None:
    ranks = [n for n in all_ranks(session) if n.gpu_busy_percent is not None]
    if len(ranks) < 2:
        return None
    busiest = max(ranks, key=lambda n: n.gpu_busy_percent or 0.0)
    idlest = min(ranks, key=lambda n: n.gpu_busy_percent or 0.0)
    spread = (busiest.gpu_busy_percent or 0.0) - (idlest.gpu_busy_percent or 0.0)
    return Imbalance(busiest, idlest, spread) if spread >= ACTIVITY_SPREAD else None


@dataclass(frozen=True)
class StarvedRank:
    rank: RankNumbers
    others_share: float  # median data-wait share of the other ranks
    loader_workers: int | None


def starved_ranks(session: Session) -> list[StarvedRank]:
    """Ranks whose loop waits for data while the others' do not."""
    numbers = [n for n in all_ranks(session) if n.steps >= MIN_STEPS and n.data_wait_share is not None]
    workers = {r.rank: r.loader_workers for r in session.ranks}
    out = []
    for n in numbers:
        others = [o.data_wait_share or 0.0 for o in numbers if o.rank != n.rank]
        if not others:
            continue
        median = statistics.median(others)
        share = n.data_wait_share or 0.0
        if share >= DATA_WAIT_SHARE and median < DATA_WAIT_SHARE and median <= share / 2:
            out.append(StarvedRank(n, median, workers.get(n.rank)))
    return out


def worst_rank(session: Session) -> int | None:
    """The rank the report's timeline shows: the straggler, else the slowest own time."""
    found = straggler(session)
    if found is not None:
        return found.rank.rank
    ranks = [n for n in all_ranks(session) if n.own_s is not None]
    return max(ranks, key=lambda n: n.own_s or 0.0).rank if ranks else None


def ranks_per_node(session: Session) -> int | None:
    """Ranks sharing this machine's cores (GD101 divides the usable cores by it)."""
    local = [r.local_world_size for r in session.ranks if r.local_world_size]
    if local:
        return max(local)
    if session.ranks:
        hosts = [r.host for r in session.ranks]
        return max(hosts.count(h) for h in hosts)
    return None


# the report's `ranks` section (gpudoctor.verdict.build): built here, from the Session; the
# renderers (gpudoctor/reports/ranks.py) read it from the Report
RANK_TIMELINE_MAX_POINTS = 400


def ranks_section(session: Session) -> dict[str, Any] | None:
    """The JSON `ranks` section: per-rank numbers, the primary and the worst rank, and the
    worst rank's step timeline. None for a one-process run."""
    if not session.ranks:
        return None
    worst = worst_rank(session)
    rows = []
    for numbers, info in zip(all_ranks(session), sorted(session.ranks, key=lambda r: r.rank)):
        rows.append({
            "rank": numbers.rank, "host": numbers.host, "pid": info.pid, "local_rank": info.local_rank,
            "backend": info.backend, "steps": numbers.steps,
            "step_time_s": _round(numbers.step_s), "own_time_s": _round(numbers.own_s),
            "backward_s": _round(numbers.backward_s),
            "data_wait_share": _round(numbers.data_wait_share, 4),
            "gpu_busy_percent": _round(numbers.gpu_busy_percent, 2),
            "comm_share": _round(numbers.comm_share, 4), "comm_overlap": _round(numbers.comm_overlap, 4),
            "loader_workers": info.loader_workers, "error": info.error,
        })
    timeline: dict[str, list[Any]] = {"t": [], "duration_s": [], "data_wait_s": [], "backward_s": []}
    worst_info = next((r for r in session.ranks if r.rank == worst), None)
    if worst_info is not None:
        records = worst_info.steps.records
        stride = max(1, len(records) // RANK_TIMELINE_MAX_POINTS + (len(records) % RANK_TIMELINE_MAX_POINTS > 0))
        for r in records[::stride]:
            timeline["t"].append(round(r.t, 3))
            timeline["duration_s"].append(r.duration_s)
            timeline["data_wait_s"].append(r.data_wait_s)
            timeline["backward_s"].append(r.backward_s)
    return {
        "world_size": max((r.world_size or 0 for r in session.ranks), default=0) or len(session.ranks),
        "recorded": len(session.ranks),
        "job_id": session.job_id,
        "primary_rank": session.primary_rank,
        "worst_rank": worst,
        "hosts": sorted({r.host for r in session.ranks if r.host}),
        "rows": rows,
        "worst_timeline": timeline,
    }


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)
