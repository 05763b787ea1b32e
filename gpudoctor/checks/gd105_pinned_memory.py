"""GD105 pageable-memory: host-to-device copies from pageable (unpinned) memory.

What it detects
    - The profiled window shows host-to-device copies of 64 KB or more from
      *pageable* memory.
    - A DataLoader feeding a CUDA run was built with ``pin_memory=False``. When a
      profile was taken, this is reported only if pageable copies were actually
      measured (data created on the GPU, or pinned by hand, costs nothing); without a
      profile it is a note.

Why it matters
    The GPU's copy engines can only read page-locked (pinned) host memory. From
    pageable memory the driver first copies into a pinned staging buffer, on the CPU,
    and the transfer is synchronous with the host: ``.to("cuda", non_blocking=True)``
    silently blocks, the copy cannot overlap with compute, and bandwidth is often half
    of what pinned memory reaches. ``pin_memory=True`` makes the loader return pinned
    batches (pinned by a background thread), so the copy runs asynchronously.

How it is measured
    From the torch.profiler window: the CUDA memcpy activities by kind (``HtoD`` from
    pageable or pinned memory), with their count, bytes and GPU time. The loader's
    ``pin_memory`` comes from the agent's record of each DataLoader. A run that put no
    work on a CUDA device is skipped.

Thresholds, and where they come from
    - Copies under {{SMALL_COPY_BYTES}} are ignored (counted by the trace reader; from the mean
      size when it did not count them): Nsight Systems' expert rules skip
      synchronous copies below 64 KB, where launch latency, not pinning, dominates
      (many small copies are GD303's business).
    - Pageable copy time >= {{PAGEABLE_SHARE_WARNING}} of the profiled window is a warning (the same "worth a
      finding" line as the data wait, GD102); below that, a note.
    - The gain: the profiled window replayed with those copies pinned and
      asynchronous (the trace's own pinned rate, else the 55.3 GB/s pinned rate measured on an
      H200 host); severity follows it when there is a replay. Without one,
      ``1 / (1 - share)`` of the window: the copies overlapped completely.

What to do
    ``DataLoader(..., pin_memory=True)`` and ``.to("cuda", non_blocking=True)`` on the
    batch. For tensors built outside a loader, allocate them pinned
    (``torch.empty(..., pin_memory=True)`` or ``tensor.pin_memory()`` once) and reuse
    the buffer.

Example
    Bad::

        loader = DataLoader(dataset, batch_size=256, num_workers=8)
        for x, y in loader:
            x, y = x.cuda(), y.cuda()

    Good::

        loader = DataLoader(dataset, batch_size=256, num_workers=8, pin_memory=True)
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.prediction import SEVERITY_GAINS, predict, severity_for
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import LoaderInfo, ProfileSummary, Session

SMALL_COPY_BYTES = CountThreshold(
    "copies below this size are ignored", 64 * 1024, "bytes",
    "Nsight Systems' expert rules skip synchronous copies below 64 KB (launch latency "
    "dominates)")
PAGEABLE_SHARE_WARNING = Threshold(
    "pageable copy time in the window: a warning at or above", 0.05, "share",
    "the same \"worth a finding\" line as the data wait (GD102, TensorBoard profiler plugin)")
MAX_SHARE_FOR_GAIN = Threshold(
    "copy share cap in 1 / (1 - share)", 0.99, "share",
    "keeps the gain finite")


@dataclass(frozen=True)
class CopyStats:
    count: int
    bytes: float
    us: float | None  # GPU time; None when the profile did not give it
    small_count: int | None  # copies under 64 KB; None when the profile did not count them

    @property
    def large_count(self) -> int:
        """Copies of 64 KB or more (estimated from the mean size when not counted)."""
        if self.small_count is not None:
            return max(0, self.count - self.small_count)
        if self.count and self.bytes / self.count >= SMALL_COPY_BYTES:
            return self.count
        return 0


def _norm(kind: str) -> str:
    return re.sub(r"[^a-z0-9]", "", kind.lower()).replace("h2d", "htod")


def htod_copies(profile: ProfileSummary, source: str) -> CopyStats:
    """Sum the profile's memcpy kinds that are host-to-device from `source` (pageable | pinned)."""
    count, size, us, small = 0, 0.0, None, None
    for kind, stats in profile.memcpy.items():
        key = _norm(kind)
        if "htod" not in key or source not in key:
            continue
        count += int(stats.get("count", 0))
        size += float(stats.get("bytes", 0.0))
        if "us" in stats:
            us = (us or 0.0) + float(stats["us"])
        if "small_count" in stats:
            small = (small or 0) + int(stats["small_count"])
    return CopyStats(count, size, us, small)


def profile_measured(profile: ProfileSummary | None) -> bool:
    """A CUDA profile that recorded GPU activity (an empty one proves nothing)."""
    return profile is not None and profile.error is None and (profile.kernel_count > 0 or bool(profile.memcpy))


@check("GD105", "pageable-memory", stage=1, title="Pageable host memory for H2D copies",
       requires=(), explains=("GD103", "GD201"),
       thresholds=SEVERITY_GAINS,
       fix=Fix("pin_memory", sizes=True, scenarios=("pinned",)))
def run(session: Session) -> list[Finding]:
    if session.torch_cuda_used is False:
        raise Skip("the run used no GPU")
    profile = session.profile if profile_measured(session.profile) else None
    if session.torch_cuda_used is None and profile is None:
        raise Skip(session.fact("gpu") or "not known whether the run used a GPU")
    unpinned = [lo for lo in session.loaders if lo.pin_memory is False and lo.batches > 0]
    if profile is None:
        if not session.loaders:
            raise Skip("no DataLoader seen and no profile of the copies")
        if all(lo.pin_memory is None for lo in session.loaders):
            raise Skip("pin_memory of the DataLoaders not recorded and no profile of the copies")
        return [_loader_note(unpinned)] if unpinned else []
    finding = _profile_finding(session, profile, unpinned)
    return [finding] if finding else []


def _loader_line(loaders: list[LoaderInfo]) -> str:
    return ", ".join(f"{lo.loader_id} ({lo.batches} batches)" for lo in loaders)


def _remedy(loaders: list[LoaderInfo]) -> Remedy:
    batch = next((lo.batch_size for lo in loaders if lo.batch_size), None)
    workers = next((lo.num_workers for lo in loaders), None)
    args = ["dataset"] + ([f"batch_size={batch}"] if batch else []) + (
        [f"num_workers={workers}"] if workers else []) + ["pin_memory=True"]
    return Remedy(
        text="Pin host memory so host-to-device copies run asynchronously: pin_memory=True on the DataLoader "
        "and .to(device, non_blocking=True) on the batch; pin hand-made host tensors once and reuse them.",
        code=f"loader = DataLoader({', '.join(args)})\n"
        "for x, y in loader:\n"
        "    x, y = x.to(\"cuda\", non_blocking=True), y.to(\"cuda\", non_blocking=True)",
    )


def _loader_note(unpinned: list[LoaderInfo]) -> Finding:
    return Finding(
        severity="info",
        title="DataLoader without pin_memory in a CUDA run",
        message=(f"{len(unpinned)} DataLoader(s) feeding a CUDA run use pin_memory=False: {_loader_line(unpinned)}. "
                 "Their batches are copied to the GPU from pageable memory, synchronously. No profile measured "
                 "what the copies cost."),
        evidence={"unpinned_loaders": Evidence([lo.loader_id for lo in unpinned], None, "whole run",
                                               "DataLoaders with pin_memory=False")},
        remedy=_remedy(unpinned),
        estimated_gain=None,
    )


def _profile_finding(session: Session, profile: ProfileSummary, unpinned: list[LoaderInfo]) -> Finding | None:
    pageable = htod_copies(profile, "pageable")
    if pageable.count == 0:
        return None  # no pageable H2D copies: pin_memory=False, if any, costs nothing here
    if pageable.large_count == 0:
        return None  # small copies only: latency-bound, not a pinning problem (GD303 looks at them)
    mean_bytes = pageable.bytes / pageable.count
    pinned = htod_copies(profile, "pinned")
    window = f"profiled window, {profile.steps} steps" if profile.steps else "profiled window"
    window_us = profile.window_s * 1e6
    share = pageable.us / window_us if pageable.us is not None and window_us > 0 else None
    evidence: dict[str, Evidence] = {
        "pageable_htod_bytes": Evidence(int(pageable.bytes), "bytes", window, "pageable host-to-device bytes"),
        "pageable_htod_copies": Evidence(pageable.count, "copies", window, "pageable host-to-device copies"),
        "pageable_copy_mean_bytes": Evidence(int(mean_bytes), "bytes", window, "mean copy size"),
        "pageable_large_copies": Evidence(pageable.large_count, "copies", window, "of them 64 KB or more"),
        "pinned_htod_bytes": Evidence(int(pinned.bytes), "bytes", window, "pinned host-to-device bytes"),
    }
    if pageable.us is not None:
        evidence["pageable_htod_time"] = Evidence(round(pageable.us / 1e3, 3), "ms", window,
                                                  "GPU time of those copies")
    if share is not None:
        evidence["pageable_share"] = Evidence(round(share * 100, 2), "%", window, "share of the profiled window")
    if unpinned:
        evidence["unpinned_loaders"] = Evidence([lo.loader_id for lo in unpinned], None, "whole run",
                                                "DataLoaders with pin_memory=False")
    total = pageable.bytes + pinned.bytes
    large = "" if pageable.large_count == pageable.count else f"{pageable.large_count} of them 64 KB or more; "
    message = (f"{pageable.count} host-to-device copies from pageable memory moved "
               f"{metrics.format_bytes(pageable.bytes)} ({large}mean {metrics.format_bytes(mean_bytes)} per copy"
               + (f", {pageable.bytes / total:.0%} of all H2D bytes" if total > 0 else "") + f") in the {window}")
    message += (f", taking {pageable.us / 1e3:.1f} ms of GPU copy time ({share:.1%} of the window)."
                if share is not None and pageable.us is not None else ".")
    message += " Pageable copies are staged through a driver buffer and block the host, so they never overlap compute."
    if unpinned:
        message += f" Likely source: DataLoader(s) with pin_memory=False: {_loader_line(unpinned)}."
    rule = 1.0 / (1.0 - min(share, MAX_SHARE_FOR_GAIN)) if share is not None else None
    prediction = predict(session, "pinned", host_side=False, rule_gain=rule,
                         rule_detail="1 / (1 - pageable copy share of the window): the copies fully overlapped")
    if prediction is not None:
        message += f" Predicted: {prediction.sentence()}."
        severity = severity_for(prediction.gain)
    else:
        severity = "warning" if share is not None and share >= PAGEABLE_SHARE_WARNING else "info"
    return Finding(
        severity=severity,
        title=f"Host-to-device copies from pageable memory ({metrics.format_bytes(pageable.bytes)} in the profile)",
        message=message,
        evidence=evidence,
        remedy=_remedy(unpinned),
        prediction=prediction,
    )
