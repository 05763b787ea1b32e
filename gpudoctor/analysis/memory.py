"""What several checks read from the allocator and the OOM errors of a Session.

GD202 (batch headroom), GD401 (fragmentation) and GD402 (out of memory) share these: the
facts of an out-of-memory failure (from PyTorch's message, its OOM observer and the
allocator snapshot taken at the failure), the fragmentation of a snapshot, the device's
memory, and the remedy that lets the allocator grow segments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor.model import Remedy

if TYPE_CHECKING:
    from gpudoctor.session import AllocatorSnapshot, ErrorEvent, Session

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
        _from_snapshot(facts, _snapshot_at_failure(at_oom, observed))
    for error in observed[-1:]:
        _from_observer(facts, error)
    if uncaught:
        _from_message(facts, uncaught[-1].message)
    if facts.expandable is None:
        facts.expandable = next((s.expandable_segments for s in reversed(session.allocator)
                                 if s.expandable_segments is not None), None)
    if facts.total is None:
        facts.total = gpu_memory_total(session)
    return facts


def _from_snapshot(facts: OomFacts, snap: AllocatorSnapshot) -> None:
    """The allocator's numbers at the failure: they come first."""
    facts.requested = snap.requested_bytes
    facts.allocated, facts.reserved = snap.allocated_bytes, snap.reserved_bytes
    facts.inactive_split = snap.inactive_split_bytes
    facts.free, facts.total = snap.device_free_bytes, snap.device_total_bytes
    facts.expandable = snap.expandable_segments


def _from_observer(facts: OomFacts, error: ErrorEvent) -> None:
    """The OOM observer's request and the device's free memory, where the snapshot gave none."""
    match = _OBSERVER.search(error.message or "")
    if match:
        facts.requested = facts.requested or int(match.group(1))
        if facts.free is None and match.group(2):
            facts.free = int(match.group(2))


def _from_message(facts: OomFacts, message: str | None) -> None:
    """PyTorch's message of the uncaught error: the numbers the snapshot and the observer left open."""
    facts.message = message
    parsed = parse_oom_message(message or "")
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


def _snapshot_at_failure(at_oom: list[AllocatorSnapshot], observed: list[ErrorEvent]) -> AllocatorSnapshot:
    """The snapshot of the failure itself, not one taken after the exception unwound and freed tensors."""
    if observed:
        t = observed[-1].t
        after = [s for s in at_oom if t is not None and s.t >= t - 0.05]
        if after:
            return min(after, key=lambda s: s.t)
    return at_oom[-1]


def oom_seen(session: Session) -> bool:
    """An out-of-memory error, caught or not, anywhere in the run."""
    return any(e.kind == "oom" for e in session.errors) or any(
        s.label == "oom" or s.num_ooms > 0 for s in session.allocator)


def gpu_memory_total(session: Session) -> int | None:
    """The smallest device memory among the run's GPUs (what a batch must fit), or None."""
    totals = [g.memory_total_bytes for g in session.environment.gpus if g.memory_total_bytes]
    return min(totals) if totals else None


ENV_FIX = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def fragmentation(snap: AllocatorSnapshot) -> float | None:
    return snap.inactive_split_bytes / snap.reserved_bytes if snap.reserved_bytes > 0 else None


def expandable_remedy(enabled: bool | None, extra: str = "") -> Remedy:
    if enabled:
        return Remedy(
            text="expandable_segments is already on. Keep tensor shapes stable (pad variable-length batches to "
            "a few bucket sizes, drop_last=True), lower the peak (smaller batch with gradient accumulation, "
            "activation checkpointing) and drop references to large temporaries early." + extra,
        )
    return Remedy(
        text="Let the allocator grow segments instead of carving fixed ones" +
        (" (it may already be set: the run did not say)" if enabled is None else "") +
        ". If fragmentation remains, keep tensor shapes stable (pad variable-length batches to a few bucket "
        "sizes, drop_last=True). It is a memory remedy and may cost time: a growing segment maps new memory, "
        "slower than reusing a cached block when a run frees and grows again near its memory cap (0.68x on "
        "the accuracy corpus's fragmentation workload, H100); `--try-only expandable_segments` measures it."
        + extra,
        code=f"export {ENV_FIX}\npython train.py   # or: {ENV_FIX} gpudoctor diagnose train.py",
    )
