"""GD401 allocator-fragmentation: PyTorch's caching allocator is fragmented or had to retry.

What it detects
    - **Allocation retries** (``num_alloc_retries > 0``): a request found no cached
      block large enough, so the allocator freed its whole cache (``cudaFree``, which
      synchronises the device) and asked CUDA again. Each retry stalls the GPU; many
      of them are a steady slowdown, and the step before an out-of-memory error.
    - **Fragmentation**: a large share of the reserved memory sits in *inactive split*
      blocks, free pieces of larger segments that cannot serve a request bigger than
      the piece. ``fragmentation = inactive_split_bytes / reserved_bytes``.
    - **Reserved far above allocated** while the device is nearly full: memory held
      by the cache, unusable by anything else, including other processes.

Why it matters
    The playbook's step 5: "bigger batch, lower utilization?" is usually allocator
    fragmentation or swapping. Varying tensor shapes (variable sequence lengths, the
    last short batch) split cached segments into pieces that no later request fits.
    With ``expandable_segments`` the allocator grows one mapped segment instead of
    carving fixed ones, which removes most of this.

How it is measured
    The agent copies ``torch.cuda.memory_stats()`` every few seconds and at exit
    (``allocated``, ``reserved``, ``inactive_split``, ``num_alloc_retries``); the
    worst snapshot counts. Snapshots taken at an out-of-memory error are GD402's.

Thresholds, and where they come from
    PyTorch documents the counters but no threshold; these are gpudoctor's starting
    points, to tune with measurements:

    - any allocation retry: warning (each one is a full cache flush and a device sync).
    - fragmentation >= {{FRAGMENTATION_SHARE}} with >= {{MIN_INACTIVE_SPLIT}} inactive split in a snapshot whose
      reserved memory is >= {{MIN_RESERVED}}: a finding; warning when the reserved memory is
      >= {{TIGHT_DEVICE_SHARE}} of the device (fragmentation then turns into OOMs), info otherwise.
    - reserved - allocated >= {{CACHED_GAP_SHARE}} of reserved and >= {{MIN_CACHED_GAP}}, with
      reserved >= {{TIGHT_DEVICE_SHARE}} of the device: reported as cached memory held back.

What to do
    Set ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (PyTorch >= 2.1). If it is
    already on: keep shapes stable (pad variable-length batches to a few bucket
    sizes, ``drop_last=True``), lower the peak (smaller batch with gradient
    accumulation, activation checkpointing), and drop references to large
    temporaries early. ``expandable_segments`` is a memory remedy and may cost time: a
    growing segment maps new memory, slower than reusing a cached block when a run frees
    and grows again near its cap (the accuracy corpus's fragmentation workload, capped at
    10 GiB, ran 0.68x as fast with it on an H100); ``--try-only expandable_segments``
    measures it on your run.

Example
    ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True gpudoctor diagnose train.py``
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.memory import expandable_remedy, fragmentation, gpu_memory_total
from gpudoctor.model import Evidence, Finding, Fix, Skip, check
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import AllocatorSnapshot, Session

FRAGMENTATION_SHARE = Threshold(
    "inactive split / reserved: fragmented at or above", 0.20, "share",
    "PyTorch documents the counters, not a line: gpudoctor's starting point")
MIN_INACTIVE_SPLIT = CountThreshold(
    "inactive split memory needed for a finding", 512 * 2**20, "bytes",
    "gpudoctor's starting point")
MIN_RESERVED = CountThreshold(
    "reserved memory below which ratios are noise", 2**30, "bytes",
    "gpudoctor's starting point")
TIGHT_DEVICE_SHARE = Threshold(
    "reserved / device memory: fragmentation turns into OOMs", 0.80, "share",
    "gpudoctor's starting point")
CACHED_GAP_SHARE = Threshold(
    "(reserved - allocated) / reserved held back by the cache", 0.50, "share",
    "gpudoctor's starting point")
MIN_CACHED_GAP = CountThreshold(
    "cached memory held back worth a mention", 2**30, "bytes",
    "gpudoctor's starting point")

@check("GD401", "allocator-fragmentation", stage=4, title="Allocator fragmentation or allocation retries",
       requires=("allocator",),
       fix=Fix("expandable_segments", sizes=True, after_crash=True))
def run(session: Session) -> list[Finding]:
    snapshots = [s for s in session.allocator if s.label != "oom"]
    if not snapshots:
        raise Skip("no allocator snapshot outside an out-of-memory error")
    retries = max(s.num_alloc_retries for s in snapshots)
    sized = [s for s in snapshots if s.reserved_bytes >= MIN_RESERVED]
    worst = max(sized, key=lambda s: fragmentation(s) or 0.0, default=None)
    frag = fragmentation(worst) if worst is not None else None
    fragmented = (worst is not None and frag is not None and frag >= FRAGMENTATION_SHARE
                  and worst.inactive_split_bytes >= MIN_INACTIVE_SPLIT)
    if not retries and not fragmented:
        return []
    shown = worst if worst is not None else max(snapshots, key=lambda s: s.reserved_bytes)
    total = shown.device_total_bytes or gpu_memory_total(session)
    tight = bool(total) and shown.reserved_bytes >= TIGHT_DEVICE_SHARE * (total or 1)
    fmt = metrics.format_bytes
    parts = []
    if retries:
        parts.append(f"The caching allocator retried {retries} allocation(s): each time no cached block was large "
                     "enough, it freed its whole cache (a device-wide synchronisation) and asked CUDA again.")
    if fragmented and frag is not None:
        parts.append(f"{frag:.0%} of the reserved memory ({fmt(shown.inactive_split_bytes)} of "
                     f"{fmt(shown.reserved_bytes)}) sat in inactive split blocks: free pieces of larger segments "
                     "that cannot serve a bigger request.")
    gap = shown.reserved_bytes - shown.allocated_bytes
    if tight and gap >= MIN_CACHED_GAP and gap >= CACHED_GAP_SHARE * shown.reserved_bytes:
        parts.append(f"Reserved memory ({fmt(shown.reserved_bytes)}) is far above what tensors use "
                     f"({fmt(shown.allocated_bytes)}) on a nearly full device: the cache holds back {fmt(gap)}.")
    if total:
        parts.append(f"Device: {fmt(total)}; reserved {shown.reserved_bytes / total:.0%} of it.")
    severity = "warning" if retries or tight else "info"
    title = (f"Allocator retried {retries} allocation(s), flushing its cache each time" if retries
             else f"Allocator fragmentation: {frag:.0%} of reserved memory is split and unused")
    evidence = {
        "num_alloc_retries": Evidence(retries, "retries", "whole run", "allocation retries"),
        "reserved": Evidence(round(shown.reserved_bytes / 2**30, 3), "GiB", _window(shown), "reserved by PyTorch"),
        "allocated": Evidence(round(shown.allocated_bytes / 2**30, 3), "GiB", _window(shown), "allocated to tensors"),
        "inactive_split": Evidence(round(shown.inactive_split_bytes / 2**30, 3), "GiB", _window(shown),
                                   "inactive split blocks"),
    }
    if frag is not None:
        evidence["fragmentation"] = Evidence(round(frag * 100, 1), "%", _window(shown), "inactive split / reserved")
    if shown.expandable_segments is not None:
        evidence["expandable_segments"] = Evidence(shown.expandable_segments, None, None, "expandable_segments on")
    return [Finding(severity=severity, title=title, message=" ".join(parts), evidence=evidence,
                    remedy=expandable_remedy(shown.expandable_segments))]


def _window(snap: AllocatorSnapshot) -> str:
    return f"{snap.label} snapshot at t={snap.t:.1f} s"
