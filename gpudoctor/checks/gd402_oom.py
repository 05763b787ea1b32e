"""GD402 out-of-memory: the run ran out of GPU memory, and whether fragmentation decided it.

What it detects
    - an uncaught ``torch.cuda.OutOfMemoryError`` (the run crashed on it), or an OOM
      followed by a failed exit: critical;
    - out-of-memory errors the program caught and survived (``num_ooms > 0``, or
      PyTorch's OOM observer fired and the run exited cleanly): warning. Code that probes batch sizes by catching
      OOM does this on purpose; every caught OOM still flushed the allocator's cache.

    It reports the numbers at the time (the request that failed, memory allocated to
    tensors, reserved by PyTorch, free on the device, the device's size) and whether
    fragmentation contributed.

Why it matters
    An OOM is either *capacity* (the working set does not fit) or *fragmentation*
    (enough memory was cached, but not in one piece). The remedies differ:
    ``expandable_segments`` fixes the second at no cost; only a smaller working set
    fixes the first.

How it is measured
    From the agent: PyTorch's OOM observer (every OOM, caught or not: the failed
    request and the device's free memory); the exception of an uncaught OOM, whose message
    PyTorch fills with the numbers ("Tried to allocate 2.00 GiB. GPU 0 has a total
    capacity of ... of which ... is free ... is reserved by PyTorch but
    unallocated"); an allocator snapshot taken by PyTorch's OOM observer at the
    moment of the failure; ``num_ooms`` in every snapshot.

Thresholds, and where they come from
    - reserved-but-unallocated memory plus the free memory the process could still
      take (the device's, within a per-process cap when one is set) >= the failed
      request: fragmentation decided it. Before failing, the allocator frees its
      cached whole segments and retries; only split segments stay, so the memory
      existed but not in one piece (PyTorch's own message says "if reserved but
      unallocated memory is large try setting expandable_segments").
    - reserved-but-unallocated >= {{FRAGMENTATION_CONTRIBUTED}} of reserved (but below the request):
      fragmentation contributed; both remedies apply.
    - otherwise: capacity.

What to do
    - fragmentation: ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``; keep shapes
      stable.
    - capacity: a smaller batch with gradient accumulation (same effective batch),
      bf16 autocast (halves activation memory), activation checkpointing on the
      largest blocks, and no references kept to graph-holding tensors (accumulate
      ``loss.item()``, not ``loss``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.memory import ENV_FIX, OomFacts, expandable_remedy
from gpudoctor.analysis.shared import analyses
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check
from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:
    from gpudoctor.session import Session

FRAGMENTATION_CONTRIBUTED = Threshold(
    "reserved-but-unallocated / reserved: fragmentation contributed", 0.10, "share",
    "gpudoctor: a tenth of the reserved memory unusable")


def cause(facts: OomFacts) -> str:
    """fragmentation | both | capacity | unknown

    Before failing, the allocator releases its cached whole segments and retries; what
    it cannot release are split segments. So when the cached-but-unused memory plus
    the device's free memory covered the request, the memory existed but not in one
    piece: fragmentation decided the OOM. Under a per-process cap, the free memory
    that counts is what the cap still allows.
    """
    unused = facts.cached_unused
    if unused is None or not facts.reserved:
        return "unknown"
    if facts.requested is not None and unused + (facts.obtainable or 0) >= facts.requested:
        return "fragmentation"
    if unused >= FRAGMENTATION_CONTRIBUTED * facts.reserved:
        return "both"
    return "capacity"


@check("GD402", "out-of-memory", stage=4, title="Out of GPU memory",
       requires=(), explains=("GD401", "GD202"),
       fix=Fix("expandable_segments", after_crash=True))
def run(session: Session) -> list[Finding]:
    facts = analyses(session).oom
    if facts is None:
        if session.fact("allocator"):
            # an uncaught OOM would show as an error; a caught one only in the allocator's counters
            raise Skip(f"no OOM error seen, and caught ones cannot be: {session.fact('allocator')}")
        return []
    kind = cause(facts)
    fmt = metrics.format_bytes
    times = f"{facts.count} time" + ("s" if facts.count != 1 else "")
    crashed = facts.uncaught or session.exit_code not in (0, None)
    if facts.uncaught:
        how = "uncaught: the run stopped there"
    elif crashed:
        how = f"{times}; the run then exited with code {session.exit_code}"
    else:
        how = f"caught by the program, {times}"
    numbers = []
    if facts.requested is not None:
        numbers.append(f"asking for {fmt(facts.requested)}")
    if facts.allocated is not None:
        numbers.append(f"{fmt(facts.allocated)} allocated to tensors")
    if facts.reserved is not None:
        numbers.append(f"{fmt(facts.reserved)} reserved by PyTorch")
    if facts.total is not None:
        free = f", {fmt(facts.free)} free" if facts.free is not None else ""
        cap = f" (this process capped at {fmt(facts.allowed)})" if facts.allowed is not None else ""
        numbers.append(f"on a device of {fmt(facts.total)}{cap}{free}")
    batch = f" at batch size {session.batch_size}" if session.batch_size else ""
    parts = [f"The run ran out of GPU memory{batch} ({how})" + (": " + ", ".join(numbers) if numbers else "") + "."]
    unused = facts.cached_unused
    if kind == "fragmentation":
        more = facts.obtainable
        where = "within the process's cap" if facts.allowed is not None else "free on the device"
        free = f" (plus {fmt(more)} {where})" if more else ""
        parts.append(f"{fmt(unused)} was reserved but unallocated{free}, enough for the request: the memory "
                     "existed but not in one piece. Fragmentation decided this OOM.")
    elif kind == "both":
        parts.append(f"{fmt(unused)} was reserved but unallocated: fragmentation contributed, but even in one "
                     "piece it would not have covered the request, so the working set must shrink too.")
    elif kind == "capacity":
        parts.append("Little memory was cached unused: the working set does not fit. Fragmentation was not "
                     "the cause.")
    else:
        parts.append("The allocator's numbers at the time were not recorded, so capacity and fragmentation "
                     "cannot be told apart.")
    evidence = {"oom_count": Evidence(facts.count, "errors", "whole run", "out-of-memory errors")}
    for key, value, label in (("requested", facts.requested, "failed request"),
                              ("allocated", facts.allocated, "allocated to tensors at the OOM"),
                              ("reserved", facts.reserved, "reserved by PyTorch at the OOM"),
                              ("reserved_unallocated", unused, "reserved but unallocated at the OOM"),
                              ("inactive_split", facts.inactive_split, "inactive split blocks at the OOM"),
                              ("device_free", facts.free, "free on the device at the OOM"),
                              ("allowed", facts.allowed, "the process's memory cap"),
                              ("device_total", facts.total, "device memory")):
        if value is not None:
            evidence[key] = Evidence(round(value / 2**30, 3), "GiB", "at the out-of-memory error", label)
    evidence["cause"] = Evidence(kind, None, None, "capacity, fragmentation, both or unknown")
    return [Finding(
        severity="critical" if crashed else "warning",
        title="Out of GPU memory" + (" (the run crashed)" if crashed else " (caught by the program)"),
        message=" ".join(parts),
        evidence=evidence,
        remedy=_remedy(kind, facts.expandable),
        ended_run=facts.uncaught,
    )]


CAPACITY = Remedy(
    text="Shrink the working set: halve the batch and accumulate gradients over two steps (same effective "
    "batch), run the forward pass under bf16 autocast (halves activation memory), checkpoint the largest "
    "blocks' activations, and keep no references to graph-holding tensors (accumulate loss.item(), not loss).",
    code="accum = 2  # batch halved, same effective batch\n"
    "for i, (x, y) in enumerate(loader):\n"
    "    with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
    "        loss = loss_fn(model(x.cuda()), y.cuda()) / accum\n"
    "    loss.backward()\n"
    "    if (i + 1) % accum == 0:\n"
    "        optimizer.step()\n"
    "        optimizer.zero_grad(set_to_none=True)\n"
    "# largest blocks: y = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)",
)


def _remedy(kind: str, expandable: bool | None) -> Remedy:
    if kind == "capacity":
        return CAPACITY
    if kind == "fragmentation":
        return expandable_remedy(expandable)
    if expandable:
        return CAPACITY
    extra = " If it still fails, shrink the working set: " + CAPACITY.text[len("Shrink the working set: "):]
    return Remedy(text=f"Set {ENV_FIX} first (free), then measure again." + extra,
                  code=f"export {ENV_FIX}\n" + (CAPACITY.code or ""))
