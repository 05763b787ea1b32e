"""GD504 rank-input-starved: one rank's input pipeline starves while the others' does not.

What it detects
    A rank whose loop waits for data 5% of its step time or more while the median of
    the other ranks stays below 5% and below half of its share.

Why it matters
    In synchronous training the starved rank becomes a straggler (GD501): every GPU
    waits for that one DataLoader. Usually its loader differs (fewer workers, another
    dataset path, a rank-only transform) or its node's storage or CPU is slower.

How it is measured
    Each rank's agent records the time its loop blocks in the DataLoader's __next__
    per step; shares are over steady steps.

Thresholds, and where they come from
    The design's data-wait line: 5% of the step (TensorBoard profiler plugin).

What to do
    Give that rank the same loader settings as the others and check its node's storage
    (GD104) and cores (GD101, which divides the node's cores by its ranks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis import ranks
from gpudoctor.model import Evidence, Finding, Remedy, Skip, check

if TYPE_CHECKING:
    from gpudoctor.session import Session


@check("GD504", "rank-input-starved", stage=5, title="One rank's input pipeline starves",
       requires=("steps",), thresholds=(ranks.DATA_WAIT_SHARE,))
def run(session: Session) -> list[Finding]:
    why = ranks.why_not_comparable(session)
    if why:
        raise Skip(why)
    findings = []
    for starved in ranks.starved_ranks(session):
        rank = starved.rank
        where = f" on {rank.host}" if rank.host else ""
        workers = "" if starved.loader_workers is None else f" (its DataLoader has {starved.loader_workers} workers)"
        findings.append(Finding(
            severity="warning",
            title=f"Rank {rank.rank}'s input pipeline starves; the other ranks' does not",
            message=(f"Rank {rank.rank}{where} waits for data {rank.data_wait_share or 0:.0%} of each step{workers}; "
                     f"the other ranks wait {starved.others_share:.0%}."),
            evidence={
                "rank": Evidence(rank.rank, label="starved rank"),
                "data_wait_share": Evidence(round(rank.data_wait_share or 0, 4), None, "steady steps"),
                "others_data_wait_share": Evidence(round(starved.others_share, 4), None, "steady steps"),
            },
            remedy=Remedy(text="Use the same DataLoader settings on every rank and check that rank's storage and "
                               "cores (a rank-only transform, another dataset path, a busy node)."),
        ))
    return findings

