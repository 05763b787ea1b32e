"""GD303 copy-bound: memory copies take a large share of the GPU's time, or come in swarms.

What it detects
    Either the GPU spends a large share of its working time on memcpy (host to
    device, device to host, device to device) rather than on kernels, or the loop
    issues many small copies (under 64 KiB) every step. Typical causes: a batch
    copied from pageable memory (``pin_memory=False``), tensors moved to the GPU one
    by one (lists of small tensors, Python scalars turned into tensors each step),
    results moved back to the CPU every step, needless ``.contiguous()`` / ``.clone()``.

Why it matters
    A copy engine moves data at PCIe/NVLink speed, far below the GPU's memory
    bandwidth, and a copy from pageable memory goes through a staging buffer at a
    fraction of that, blocking the host meanwhile. Small copies cost a fixed
    overhead each (a launch and often a synchronisation) whatever their size, so a
    swarm of them achieves a tiny bandwidth. Measured on an H200 (PCIe Gen5): a 37 MB
    batch copied at 13.8 GB/s from pageable memory and 55.3 GB/s from pinned memory;
    400-byte copies ran at well under 1 GB/s, each followed by a synchronisation.

How it is measured
    From the torch.profiler window: every ``gpu_memcpy`` event's kind (from its name,
    e.g. ``Memcpy HtoD (Pageable -> Device)``), bytes and duration. The copy share is
    copy time / (copy time + kernel time); the achieved bandwidth is bytes / copy
    time per kind; small copies are those under 64 KiB.

Thresholds, and where they come from
    - copy share >= {{SHARE_WARNING}}: warning; >= {{SHARE_CRITICAL}}: critical. gpudoctor's starting points:
      at 20% the copies cost more than most kernel-level changes gain.
    - {{SMALL_PER_STEP}} or more small copies per step ({{SMALL_IN_WINDOW}} in the window when steps are unknown):
      a finding (info; warning when copies also take >= {{SMALL_SHARE_WARNING}} of the GPU's time).
      Nsight Systems ignores synchronous host-to-device copies under 64 KiB one at a
      time; in numbers they add up. A window without steps (a module-less loop shipping
      tensors one by one, profiled by time) gives copies per second instead.
    Severity then follows the predicted gain: the profiled window replayed with
    pageable copies pinned and asynchronous (at the pinned rate the trace shows, else
    the one measured on an H200 host) or with runs of small copies stacked into one,
    whichever buys more. Without a replay: GPU window / (window - copy time).

What to do
    Pin host memory and copy asynchronously (``pin_memory=True`` in the DataLoader,
    ``.to("cuda", non_blocking=True)``); stack small tensors on the host and copy once
    (or create them on the GPU directly); keep results on the GPU and move them back
    only when needed; avoid copies the code does not need (``.contiguous()``,
    ``.clone()``, dtype round trips).

Example
    Bad: pageable, blocking, one tensor at a time::

        for x in batch_list:
            inputs.append(x.to("cuda"))

    Good: one pinned, asynchronous copy per batch::

        loader = DataLoader(dataset, batch_size=B, num_workers=W, pin_memory=True)
        for x, y in loader:
            x = x.to("cuda", non_blocking=True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis.prediction import SEVERITY_GAINS, predict, severity_for
from gpudoctor.checks._profile import MAX_GAIN, gpu_profile, per_window, window_name, window_seconds
from gpudoctor.metrics import format_bytes, format_duration
from gpudoctor.model import Evidence, Finding, Fix, Prediction, Remedy, check
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import ProfileSummary, Session

SHARE_WARNING = Threshold(
    "copy time / (copy + kernel time): a warning", 0.20, "share",
    "gpudoctor: a fifth of the GPU's time moving data")
SHARE_CRITICAL = Threshold(
    "copy time / (copy + kernel time): critical", 0.50, "share",
    "gpudoctor: copies take as long as the compute")
SMALL_PER_STEP = CountThreshold(
    "small copies per step: many", 10, "copies/step",
    "Nsight Systems' 64 KB line for a small copy; gpudoctor's count")
SMALL_IN_WINDOW = CountThreshold(
    "small copies in a window without steps: many", 50, "copies",
    "gpudoctor")
SMALL_SHARE_WARNING = Threshold(
    "small copies' share of the window for a warning", 0.10, "share",
    "gpudoctor")

REMEDY = Remedy(
    text="Pin host memory and copy asynchronously (pin_memory=True, non_blocking=True); gather small "
    "tensors on the host and copy them once, or create them on the GPU; keep results on the GPU until "
    "they are needed; drop copies the code does not need (.contiguous(), .clone(), dtype round trips).",
    code="loader = DataLoader(dataset, batch_size=B, num_workers=W, pin_memory=True)\n"
    "for x, y in loader:\n"
    "    x = x.to(\"cuda\", non_blocking=True)\n"
    "    y = y.to(\"cuda\", non_blocking=True)\n"
    "# many small tensors: one copy instead of one each\n"
    "extras = torch.stack(small_tensors).pin_memory().to(\"cuda\", non_blocking=True)",
)


def _severity(share: float, many_small: bool) -> str | None:
    """The severity by the copies' share alone (before the prediction), or None: no finding."""
    if share >= SHARE_CRITICAL:
        return "critical"
    if share >= SHARE_WARNING or (many_small and share >= SMALL_SHARE_WARNING):
        return "warning"
    if many_small:
        return "info"
    return None


def _totals_evidence(window: str, share: float, copy_us: float, count: int, nbytes: float, small: int,
                     small_per_step: float | None, seconds: float | None) -> dict[str, Evidence]:
    evidence = {
        "copy_share": Evidence(round(share * 100, 1), "%", window, "copy time / (copy + kernel time)"),
        "copy_time": Evidence(round(copy_us / 1e3, 3), "ms", window, "GPU time in memcpy"),
        "copy_count": Evidence(count, "copies", window, "memcpy operations"),
        "copy_bytes": Evidence(int(nbytes), "bytes", window, "bytes copied"),
        "small_copies": Evidence(small, "copies", window, "copies under 64 KiB"),
    }
    if small_per_step is not None:
        evidence["small_copies_per_step"] = Evidence(round(small_per_step, 1), "copies/step", window,
                                                     "copies under 64 KiB per step")
    elif seconds:
        evidence["small_copies_per_second"] = Evidence(round(small / seconds), "copies/s", window,
                                                       "copies under 64 KiB per second (the window has no steps)")
    return evidence


def _by_kind(kinds: dict[str, dict[str, float]], window: str, evidence: dict[str, Evidence]) -> list[str]:
    """Each kind's bandwidth into `evidence`, largest copy time first; its line for the message."""
    parts = []
    for kind, v in sorted(kinds.items(), key=lambda kv: -float(kv[1].get("us", 0))):
        us, moved = float(v.get("us", 0)), float(v.get("bytes", 0))
        # bytes/us = MB/s; /1e3 = GB/s. Traces time copies to the nanosecond: less was not measured
        rate = moved / us / 1e3 if us >= 1e-3 else None
        evidence[f"{kind}_bandwidth"] = Evidence(round(rate, 2) if rate is not None else None, "GB/s", window,
                                                 f"{kind}: {int(float(v.get('count', 0)))} copies, "
                                                 f"{format_bytes(moved)}")
        parts.append(f"{kind} {int(float(v.get('count', 0)))}x {format_bytes(moved)} in "
                     f"{format_duration(us / 1e6)}" + (f" ({rate:.1f} GB/s)" if rate is not None else ""))
    return parts


def _prediction(session: Session, profile: ProfileSummary, kinds: dict[str, dict[str, float]], copy_us: float,
                many_small: bool) -> Prediction | None:
    """The what-if that fits: pageable copies pinned, or small ones stacked (the larger of the two);
    else the copies overlapped with compute."""
    span = profile.gpu_busy_us + profile.gpu_idle_us
    hidden = min(copy_us, span * 0.999) if span > 0 else 0.0
    # span * 0.999 rounds back to span for a subnormal span: then there is no gain to state
    rule = min(MAX_GAIN, span / (span - hidden)) if 0 < hidden < span else None
    options = [predict(session, name, host_side=False, rule_gain=rule,
                       rule_detail="GPU span / (span - copy time): the copies fully overlapped with compute")
               for name in (("pinned",) if any(k.endswith("_pageable") for k in kinds) else ())
               + (("small_copies",) if many_small else ())]
    options = [p for p in options if p is not None] or [
        predict(session, "copies", host_side=False, rule_gain=rule, label="if the copies overlapped with compute",
                rule_detail="GPU span / (span - copy time): the copies fully overlapped with compute")]
    return max((p for p in options if p is not None), key=lambda p: p.gain, default=None)


def _run(session: Session) -> list[Finding]:
    profile = gpu_profile(session)
    kinds = {k: v for k, v in profile.memcpy.items() if isinstance(v, dict)}
    copy_us = sum(float(v.get("us", 0)) for v in kinds.values())
    if not kinds or copy_us <= 0:
        return []
    count = int(sum(float(v.get("count", 0)) for v in kinds.values()))
    nbytes = sum(float(v.get("bytes", 0)) for v in kinds.values())
    small = int(sum(float(v.get("small_count", 0)) for v in kinds.values()))
    share = copy_us / (copy_us + profile.kernel_total_us)
    small_per_step = small / profile.steps if profile.steps else None
    many_small = small_per_step >= SMALL_PER_STEP if small_per_step is not None else small >= SMALL_IN_WINDOW
    severity = _severity(share, many_small)
    if severity is None:
        return []
    window = window_name(profile)
    seconds = window_seconds(profile) if not profile.steps else None
    evidence = _totals_evidence(window, share, copy_us, count, nbytes, small, small_per_step, seconds)
    parts = _by_kind(kinds, window, evidence)
    prediction = _prediction(session, profile, kinds, copy_us, many_small)
    gain = prediction.gain if prediction is not None else None
    if gain is not None:
        severity = severity_for(gain)
    pageable = [k for k in kinds if k.endswith("_pageable")]
    message = (
        f"Copies took {share:.0%} of the GPU's working time in the {window}: {count:,} copies, "
        f"{format_bytes(nbytes)} in {format_duration(copy_us / 1e6)}; {small:,} of them under 64 KiB. "
        f"By kind: {'; '.join(parts)}."
        + (f" {' and '.join(pageable)} copies use pageable host memory: pin it." if pageable else "")
        + (f" Predicted: {prediction.sentence()}." if prediction is not None else "")
    )
    title = ("Copies dominate the GPU's time" if share >= SHARE_WARNING
             else "Many small host-device copies every step")
    return [Finding(severity=severity, title=title, message=message, evidence=evidence, remedy=REMEDY,
                    prediction=prediction, estimated_gain=gain)]


run = check("GD303", "copy-bound", stage=3, title="Memory copies dominate",
            requires=("profile",), explains=("GD103", "GD201"),
            thresholds=SEVERITY_GAINS,
            fix=Fix(untried="the copies are made by the code itself: stack small copies, keep data on the GPU",
                    scenarios=("pinned", "small_copies")))(per_window(_run))
