"""EX401 host-memory: the watched processes came close to the host's memory.

What it detects
    The resident memory of the workload's process tree (the main process and its
    DataLoader workers) peaked above 80% of the host's memory (critical above 90%).

Why it matters
    Past that the kernel starts to reclaim page cache (the dataset's reads get slower)
    and then the out-of-memory killer ends a worker or the run (SIGKILL, no traceback).

How it is measured
    gpudoctor's CPU sampler reads the resident set size of every process of the tree
    each interval; the peak is compared with the host's total memory.

What to do
    Fewer DataLoader workers or a smaller prefetch_factor; keep samples in numpy arrays
    or memory-mapped files rather than Python objects (each worker holds a copy of what
    the Dataset keeps in Python objects).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.model import Evidence, Finding, Remedy, Skip, check
from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:  # an annotation only: `gpudoctor checks` imports this module and runs nothing
    from gpudoctor.session import Session

# written once: the code compares against these, `gpudoctor explain EX401` prints them
WARN_SHARE = Threshold("peak resident memory of the tree: a warning", 0.8, "share",
                       "the kernel starts reclaiming page cache well before memory is full")
CRITICAL_SHARE = Threshold("peak resident memory of the tree: critical", 0.9, "share",
                           "the out-of-memory killer is close")


# skipped with the sampler's reason when there are no CPU samples (requires)
@check("EX401", "host-memory", stage=4, title="Host memory nearly full", requires=("cpu",))
def run(session: Session) -> list[Finding]:
    total = session.environment.host_memory_total_bytes
    peaks = [s.tree_rss_bytes for s in session.cpu_samples if s.tree_rss_bytes]
    if not total or not peaks:
        raise Skip("no resident-memory samples of the process tree")  # skipped, with the reason
    share = max(peaks) / total
    if share < WARN_SHARE:
        return []  # the check passed
    return [
        Finding(
            severity="critical" if share >= CRITICAL_SHARE else "warning",
            title="Host memory nearly full",
            message=f"The process tree peaked at {max(peaks) / 2**30:.1f} GiB resident, {share:.0%} of the "
                    f"host's {total / 2**30:.1f} GiB.",
            evidence={
                "peak_rss_bytes": Evidence(max(peaks), "bytes", "whole run", "peak resident memory"),
                "host_share": Evidence(round(share, 3), None, "whole run", "share of host memory"),
            },
            remedy=Remedy("Lower num_workers or prefetch_factor; keep samples in numpy arrays, not Python "
                          "objects.", "loader = DataLoader(dataset, num_workers=2, prefetch_factor=2)"),
        )
    ]



CHECK = run.check  # what the entry point named before @check existed ("gpudoctor_example_check:CHECK")
