"""GD302 host-sync: host synchronisations drain the GPU queue inside the loop.

What it detects
    The training loop calls into CUDA in ways that block the CPU until the GPU has
    finished everything queued so far: ``tensor.item()``, ``.cpu()`` / ``.tolist()`` /
    ``.numpy()``, ``print(tensor)`` or f-strings of tensors, ``torch.cuda.synchronize()``,
    blocking copies from pageable memory, data-dependent shapes (``nonzero``, boolean
    masks). Each one empties the GPU's queue: when the CPU resumes, it must launch the
    next kernels from scratch while the GPU waits.

Why it matters
    Normally the CPU runs ahead of the GPU, queueing work while earlier kernels run,
    so Python and launch overheads are hidden. After a synchronisation there is no
    queue: the GPU idles for the time the host needs to issue the next work, every
    time. A single ``loss.item()`` per step costs little; several per step, or one
    inside an inner loop, can cost a large share of the step.

How it is measured
    From the torch.profiler window: blocking CUDA calls (``cudaStreamSynchronize``,
    ``cudaDeviceSynchronize``, ``cudaEventSynchronize``, synchronous ``cudaMemcpy``, and
    ``cudaFree``, which waits for the device: the caching allocator returning memory),
    their count and the CPU time they blocked. Each is named after the ATen operator
    around it (``aten::item`` for ``.item()``, ``aten::to`` for ``.cpu()`` and blocking
    copies) and placed in the innermost Python function of your code around it, with
    the call it made (``train_step (train.py:40) -> Tensor.item``; torch records the
    function's ``def`` line). The GPU's cost is the idle time *after* syncs: gaps that
    began while the host was blocked in a sync and ended after it returned, i.e. the
    GPU ran dry and waited for the host to queue new work, as a share of the span from
    the GPU's first to last activity.

Thresholds, and where they come from
    - idle after syncs >= 10% of the GPU span: warning; >= 30%: critical. Below 10%
      the syncs cost the GPU little (it is the bottleneck anyway).
    - {{PER_STEP}} or more synchronisations per step ({{IN_WINDOW}} in the window when steps are unknown;
      a window without steps gives syncs per second) with less idle: info. One ``loss.item()``
      per step for logging is customary; two or more mean the loop synchronises *inside* the
      step. Nsight Systems' expert rules flag every synchronising API call; gpudoctor reports
      them when they repeat or cost GPU time.
    Severity by the predicted gain ({{GAIN_WARNING}} warning, {{GAIN_CRITICAL}} critical): the profiled
    window replayed with the workload's syncs no longer blocking, so the host runs ahead
    and the GPU's queue stays full; the operators that read the values (``.item()``,
    ``.cpu()`` of a result) keep their host cost, since the remedy still dispatches one
    operator to consume each value on the GPU; never more than a host-side fix can buy
    while the GPU was busy. Without a replay: span / (span - idle after syncs). Measured on
    an H200: a small MLP step with ``.item()``, ``.cpu()`` and ``torch.cuda.synchronize()``
    left the GPU idle 22% of its span after those syncs; 50 blocking ``.to("cuda")`` copies
    of small pageable tensors per step, 20%.

What to do
    Keep values on the GPU and read them rarely: accumulate ``loss.detach()`` in a
    GPU tensor and call ``.item()`` every N steps; move metrics to the end of the
    epoch; use ``non_blocking=True`` copies from pinned memory; avoid
    ``torch.cuda.synchronize()`` outside timing code. ``torch.cuda.set_sync_debug_mode("warn")``
    prints a warning with a stack trace at every synchronising call.

Example
    Bad: three synchronisations per step::

        loss = criterion(model(x), y); loss.backward(); opt.step()
        total += loss.item()
        correct += (out.argmax(1) == y).sum().cpu()
        print(f"loss {loss}")

    Good: accumulate on the GPU, read once every 100 steps::

        total += loss.detach()
        if step % 100 == 0:
            print(f"loss {total.item() / 100:.4f}")
            total.zero_()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis.prediction import SEVERITY_GAINS, predict, severity_for
from gpudoctor.checks._profile import MAX_GAIN, gpu_profile, per_window, window_name, window_seconds
from gpudoctor.metrics import format_duration
from gpudoctor.model import Evidence, Finding, Fix, Remedy, check
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import Session

PER_STEP = Threshold(
    "synchronisations per step: more is a finding", 2.0, "syncs/step",
    "more than the customary one loss.item() per step (and one spare)")
IN_WINDOW = CountThreshold(
    "synchronisations in the window when its steps are unknown", 10, "syncs",
    "gpudoctor")
MAX_SITES = 3

REMEDY = Remedy(
    text="Keep values on the GPU and read them rarely: accumulate loss.detach() and call .item() every N "
    "steps, compute metrics at the end of the epoch, copy with non_blocking=True from pinned memory, and "
    "drop torch.cuda.synchronize() outside timing code. torch.cuda.set_sync_debug_mode(\"warn\") names "
    "every synchronising call with its stack.",
    code="torch.cuda.set_sync_debug_mode(\"warn\")   # find them: a warning at every synchronising call\n"
    "running = torch.zeros((), device=\"cuda\")\n"
    "for step, (x, y) in enumerate(loader):\n"
    "    loss = train_step(x.to(\"cuda\", non_blocking=True), y.to(\"cuda\", non_blocking=True))\n"
    "    running += loss.detach()                 # no sync\n"
    "    if step % 100 == 99:\n"
    "        print(f\"loss {running.item() / 100:.4f}\")  # one sync per 100 steps\n"
    "        running.zero_()",
)


def _run(session: Session) -> list[Finding]:
    profile = gpu_profile(session)
    if profile.sync_count == 0:
        return []
    span = profile.gpu_busy_us + profile.gpu_idle_us
    idle_share = min(1.0, profile.idle_after_sync_us / span) if span > 0 else 0.0
    per_step = profile.sync_count / profile.steps if profile.steps else None
    frequent = per_step >= PER_STEP if per_step is not None else profile.sync_count >= IN_WINDOW
    attributable = min(profile.idle_after_sync_us, span * 0.999)
    rule = span / (span - attributable) if 0 < attributable < span else 1.0
    prediction = predict(session, "sync", host_side=True, rule_gain=min(MAX_GAIN, rule),
                         rule_detail="span / (span - GPU idle after syncs) of the profiled window")
    gain = prediction.gain if prediction is not None else 1.0
    severity = severity_for(gain)
    if severity == "info" and not frequent:
        return []
    window = window_name(profile)
    seconds = window_seconds(profile) if not profile.steps else None
    evidence = {
        "sync_count": Evidence(profile.sync_count, "calls", window, "blocking CUDA synchronisations"),
        "sync_time": Evidence(round(profile.sync_total_us / 1e3, 3), "ms", window, "CPU time blocked in them"),
        "idle_after_sync": Evidence(round(profile.idle_after_sync_us / 1e3, 3), "ms", window,
                                    "GPU idle after a sync emptied its queue"),
        "idle_after_sync_share": Evidence(round(idle_share * 100, 1), "%", window,
                                          "GPU idle after syncs / GPU span"),
    }
    if per_step is not None:
        evidence["syncs_per_step"] = Evidence(round(per_step, 2), "calls/step", window, "synchronisations per step")
    elif seconds:
        evidence["syncs_per_second"] = Evidence(round(profile.sync_count / seconds, 1), "calls/s", window,
                                                "synchronisations per second (the window has no steps)")
    for n, site in enumerate(profile.sync_sites[:MAX_SITES], start=1):
        evidence[f"site_{n}"] = Evidence(
            f"{site.api} in {site.site or 'an unknown call site'} ({site.count}x, "
            f"{format_duration(site.total_us / 1e6)} blocked)", None, window, f"sync site {n}")
    rate = f", {per_step:.1f} per step," if per_step is not None else \
        f", {profile.sync_count / seconds:,.0f} per second," if seconds else ""
    sites = "; ".join(f"{s.api} in {s.site or 'an unknown call site'} ({s.count}x)"
                      for s in profile.sync_sites[:MAX_SITES])
    message = (
        f"The host synchronised with the GPU {profile.sync_count:,} times in the {window}{rate}, blocked "
        f"{format_duration(profile.sync_total_us / 1e6)} in all. Each sync empties the GPU's queue; after "
        f"them the GPU idled {format_duration(profile.idle_after_sync_us / 1e6)} waiting for new work, "
        f"{idle_share:.0%} of its span."
        + (f" Where: {sites}." if sites else "")
        + (f" Predicted: {prediction.sentence()}." if prediction is not None else "")
    )
    title = "Host synchronisations stall the GPU queue" if severity != "info" else \
        "Host synchronisations in the loop, at little cost to the GPU"
    return [Finding(severity=severity, title=title, message=message, evidence=evidence, remedy=REMEDY,
                    prediction=prediction)]


run = check("GD302", "host-sync", stage=3, title="Host synchronisations in the loop",
            requires=("profile",), explains=("GD201",),
            thresholds=SEVERITY_GAINS,
            fix=Fix(untried="the synchronising calls are in the code (their call sites are listed in the finding)",
                    scenarios=("sync",)))(per_window(_run))
