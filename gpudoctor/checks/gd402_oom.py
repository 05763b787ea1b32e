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
    - reserved-but-unallocated >= 10% of reserved (but below the request):
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

import re
from dataclasses import dataclass

from gpudoctor.checks.gd401_fragmentation import ENV_FIX, expandable_remedy

from gpudoctor import metrics
from gpudoctor.model import Evidence, Finding, Remedy, Skip, check
from gpudoctor.session import AllocatorSnapshot, ErrorEvent, Session

FRAGMENTATION_CONTRIBUTED = 0.10  # reserved-but-unallocated / reserved
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 10**3, "MB": 10**6, "GB": 10**9}
_SIZE = r"([\d.]+) ?(B|KiB|MiB|GiB|TiB|KB|MB|GB)"
_PATTERNS = {  # PyTorch >= 2.1 wording first, then the older one
    "requested": [rf"Tried to allocate {_SIZE}"],
    "total": [rf"total capacity of {_SIZE}", rf"{_SIZE} total capacity"],
    "free": [rf"of which {_SIZE} is free", rf"{_SIZE} free;"],
    "allocated": [rf"{_SIZE} is allocated by PyTorch", rf"{_SIZE} already allocated"],
    "unallocated": [rf"{_SIZE} is reserved by PyTorch but unallocated"],
    "reserved": [rf"{_SIZE} reserved in total by PyTorch"],
    "allowed": [rf"{_SIZE} allowed"],  # a per-process cap (set_per_process_memory_fraction)
}


_OBSERVER = re.compile(r"allocation of (\d+) bytes failed(?: \(device free (\d+) bytes\))?")


@dataclass
class OomFacts:
    uncaught: bool  # the exception reached the top (the agent's excepthook recorded it)
    count: int
    requested: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    free: int | None = None
    total: int | None = None
    allowed: int | None = None  # the process's cap, when one was set
    inactive_split: int | None = None
    expandable: bool | None = None
    message: str | None = None

    @property
    def cached_unused(self) -> int | None:
        if self.reserved is None or self.allocated is None:
            return None
        return max(0, self.reserved - self.allocated)

    @property
    def obtainable(self) -> int | None:
        """What the process could still have taken from CUDA: the device's free memory, within its cap."""
        if self.allowed is None or self.reserved is None:
            return self.free
        headroom = max(0, self.allowed - self.reserved)
        return headroom if self.free is None else min(self.free, headroom)


def parse_oom_message(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for key, patterns in _PATTERNS.items():
        for pattern in patterns:
            match = re.search(pattern, text)
            if match:
                found[key] = int(float(match.group(1)) * _UNITS[match.group(2)])
                break
    return found


def is_uncaught(error: ErrorEvent) -> bool:
    """The excepthook's record (traceback, PyTorch's wording), not the OOM observer's.

    PyTorch's OOM observer fires for every OOM, caught or not; the agent's excepthook
    only for an exception that ended a thread or the program.
    """
    return bool(error.traceback) or "out of memory" in (error.message or "").lower()


def oom_facts(session: Session) -> OomFacts | None:
    errors: list[ErrorEvent] = [e for e in session.errors if e.kind == "oom"]
    uncaught = [e for e in errors if is_uncaught(e)]
    observed = [e for e in errors if not is_uncaught(e)]
    at_oom: list[AllocatorSnapshot] = [s for s in session.allocator if s.label == "oom"]
    counted = max((s.num_ooms for s in session.allocator), default=0)
    if not errors and not at_oom and counted <= 0:
        return None
    facts = OomFacts(uncaught=bool(uncaught), count=max(counted, len(observed), 1))
    if at_oom:
        snap = _snapshot_at_failure(at_oom, observed)
        facts.requested = snap.requested_bytes
        facts.allocated, facts.reserved = snap.allocated_bytes, snap.reserved_bytes
        facts.inactive_split = snap.inactive_split_bytes
        facts.free, facts.total = snap.device_free_bytes, snap.device_total_bytes
        facts.expandable = snap.expandable_segments
    for error in observed[-1:]:
        match = _OBSERVER.search(error.message or "")
        if match:
            facts.requested = facts.requested or int(match.group(1))
            if facts.free is None and match.group(2):
                facts.free = int(match.group(2))
    if uncaught:
        facts.message = uncaught[-1].message
        parsed = parse_oom_message(uncaught[-1].message or "")
        facts.requested = facts.requested or parsed.get("requested")
        facts.total = facts.total or parsed.get("total")
        facts.free = facts.free if facts.free is not None else parsed.get("free")
        facts.allowed = parsed.get("allowed")
        if facts.allocated is None and "allocated" in parsed:
            facts.allocated = parsed["allocated"]
            reserved = parsed.get("reserved")
            if reserved is None and "unallocated" in parsed:
                reserved = parsed["allocated"] + parsed["unallocated"]
            facts.reserved = reserved
    if facts.expandable is None:
        facts.expandable = next((s.expandable_segments for s in reversed(session.allocator)
                                 if s.expandable_segments is not None), None)
    if facts.total is None:
        totals = [g.memory_total_bytes for g in session.environment.gpus if g.memory_total_bytes]
        facts.total = min(totals) if totals else None
    return facts


def _snapshot_at_failure(at_oom: list[AllocatorSnapshot], observed: list[ErrorEvent]) -> AllocatorSnapshot:
    """The snapshot of the failure itself, not one taken after the exception unwound and freed tensors."""
    if observed:
        t = observed[-1].t
        after = [s for s in at_oom if t is not None and s.t >= t - 0.05]
        if after:
            return min(after, key=lambda s: s.t)
    return at_oom[-1]


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
       requires=(), explains=("GD401", "GD202"))
def run(session: Session) -> list[Finding]:
    facts = oom_facts(session)
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
