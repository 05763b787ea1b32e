"""GD503 gpu-imbalance: the ranks' GPUs are not equally busy.

What it detects
    The GPU activity (GPM SM activity where measured, else NVML utilization) of the
    busiest and the idlest rank's GPU differ by 20 percentage points or more over the
    time the ranks stepped.

Why it matters
    Equal work per rank should keep equal GPUs equally busy. A gap means unequal work
    (uneven shards, variable sequence lengths without bucketing, rank-only work on the
    GPU) or one GPU held back (clocks, PCIe, another process on it).

How it is measured
    The supervisor samples every GPU the job uses (NVML, every 0.5 s); each rank's mean
    over its steady steps is in its row of the report.

Thresholds, and where they come from
    A spread of 20 points (gpudoctor/analysis/ranks.py says why).

What to do
    Balance the work per rank (DistributedSampler with equal shards, length-bucketed
    batches), move rank-0-only GPU work out of the loop, and check the idle GPU's clocks
    (GD203) and what else runs on it (nvidia-smi).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis import ranks
from gpudoctor.model import Evidence, Finding, Remedy, Skip, check

if TYPE_CHECKING:
    from gpudoctor.session import Session


@check("GD503", "gpu-imbalance", stage=5, title="Unequal GPU activity across ranks", requires=("gpu",),
       thresholds=(ranks.ACTIVITY_SPREAD,))
def run(session: Session) -> list[Finding]:
    why = ranks.why_not_comparable(session)
    if why:
        raise Skip(why)
    if sum(1 for n in ranks.all_ranks(session) if n.gpu_busy_percent is not None) < 2:
        raise Skip(session.fact("gpu") or "GPU activity was not measured for two ranks or more")
    found = ranks.activity_imbalance(session)
    if found is None:
        return []
    window = "steady steps"
    return [Finding(
        severity="warning",
        title=f"GPU activity differs across ranks (rank {found.idlest.rank} idles most)",
        message=(f"Rank {found.busiest.rank}'s GPU is {found.busiest.gpu_busy_percent:.0f}% busy, rank "
                 f"{found.idlest.rank}'s only {found.idlest.gpu_busy_percent:.0f}%: a spread of "
                 f"{found.spread:.0f} points between ranks doing the same job."),
        evidence={
            "busiest_rank": Evidence(found.busiest.rank, label="busiest rank"),
            "busiest_percent": Evidence(round(found.busiest.gpu_busy_percent or 0, 2), "%", window),
            "idlest_rank": Evidence(found.idlest.rank, label="idlest rank"),
            "idlest_percent": Evidence(round(found.idlest.gpu_busy_percent or 0, 2), "%", window),
            "spread": Evidence(round(found.spread, 2), "points", window),
        },
        remedy=Remedy(text="Give every rank the same amount of work per step (equal shards, length-bucketed "
                           "batches) and keep rank-only work off the GPU inside the loop."),
    )]

