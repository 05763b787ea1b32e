"""GD502 communication-exposed: collectives take a large share of the step, not hidden by compute.

What it detects
    NCCL kernels (``nccl*``, ``ncclDevKernel_*``: all-reduce, all-gather,
    reduce-scatter, broadcast) in the ranks' profiled windows: what share of the window
    they take, and how much of that ran while compute kernels ran on other streams
    (overlapped). Communication that is not overlapped stalls the step.

Why it matters
    DDP overlaps the gradient all-reduce with the rest of backward bucket by bucket;
    FSDP prefetches parameters. When the overlap fails (one huge bucket, a sync after
    backward, find_unused_parameters, a slow interconnect) every step waits for the
    network.

How it is measured
    Per rank, from its profiled window (gpudoctor/collectors/trace.py): the union of
    NCCL kernel intervals, and its intersection with the union of all other kernels.
    On the gloo backend or on CPU there are no NCCL kernels: the check is skipped and
    says so.

Thresholds, and where they come from
    Exposed (not overlapped) communication >= 10% of the window (gpudoctor/analysis/ranks.py).
    Estimated gain: 1 / (1 - exposed share), an upper bound (communication fully hidden).

What to do
    Let DDP overlap: smaller ``bucket_cap_mb``, ``gradient_as_bucket_view=True``, no
    ``find_unused_parameters`` unless needed, bf16 gradient compression hooks; for
    several nodes, check the interconnect (NCCL_DEBUG=INFO shows the transport).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis import ranks
from gpudoctor.model import Evidence, Finding, Remedy, Skip, check

if TYPE_CHECKING:
    from gpudoctor.session import Session


@check("GD502", "communication-exposed", stage=5,
       title="Collective communication not overlapped with compute", thresholds=(ranks.EXPOSED_COMM_SHARE,))
def run(session: Session) -> list[Finding]:
    if not session.ranks:
        raise Skip("not a distributed job (no torch.distributed ranks were recorded)")
    comm = ranks.communication(session)
    if comm is None:
        raise Skip(ranks.why_no_communication(session))
    if comm.exposed_share < ranks.EXPOSED_COMM_SHARE:
        return []
    window = f"profiled windows of {len(comm.ranks)} rank(s)"
    return [Finding(
        severity="warning",
        title="Communication is not overlapped with compute",
        message=(f"NCCL collectives take {comm.comm_share:.0%} of the profiled window and only {comm.overlap:.0%} "
                 f"of that time overlaps compute kernels: {comm.exposed_share:.0%} of each step waits for "
                 "communication."),
        evidence={
            "comm_share": Evidence(round(comm.comm_share, 4), None, window, "NCCL kernel time share"),
            "overlap": Evidence(round(comm.overlap, 4), None, window, "share of it overlapped"),
            "exposed_share": Evidence(round(comm.exposed_share, 4), None, window, "not overlapped"),
        },
        remedy=Remedy(
            text="Let DDP overlap the all-reduce with backward: smaller buckets, gradient views, compression.",
            code=("model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)\n"
                  "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                  "model.register_comm_hook(None, default_hooks.bf16_compress_hook)"),
        ),
        estimated_gain=round(1 / max(1 - comm.exposed_share, 1e-9), 3),
    )]

