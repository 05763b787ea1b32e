"""What a Timeline is made of: host items (per thread) and GPU operations (per stream)."""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

CPU, LAUNCH, SYNC, BLOCKING_COPY = 0, 1, 2, 3
# CPU item tags: Python in torch or another library (framework glue), operator dispatch of
# GPU work, a DataLoader wait, and Python in the user's own frames (with_stack traces only)
PYTHON, DISPATCH, DATA, USER = "python", "dispatch", "data", "user"
SLACK_US = 3.0  # host and GPU clocks agree to a few microseconds


@dataclass(slots=True)
class HostItem:
    kind: int  # CPU | LAUNCH | SYNC | BLOCKING_COPY
    thread: int
    ts: float  # measured start, us
    dur: float  # measured duration, us
    tag: str = PYTHON  # CPU items: python | dispatch | data
    ops: list[int] = field(default_factory=list)  # GPU operations this call queued
    scope: Any = None  # SYNC: the stream it waited on; None = every stream
    waited: bool = False  # the call was measured blocking on GPU work
    post: float = 0.0  # from the end of the awaited GPU work to the call's return, us
    agent: bool = False  # gpudoctor's own (closing the profiler window): never edited
    api: str = ""
    read: tuple[float, float] | None = None  # SYNC: the operator that only read a value back (.item(), .cpu())
    optimizer: bool = False  # inside an optimizer's step(): not what compiling the model replaces
    # what a fused optimizer replaces: inside step()'s update function where Python stacks show it
    # (the rest of step() runs alike, fused or not), else the whole step
    fused: bool = False
    # the thread's outermost nn.Module call the item ran in (numbered per thread; -1: none, or no
    # Python stacks): what torch.compile of the model turns into one compiled call
    call: int = -1
    # a burst of a helper thread folded into the thread that waited for it (the autograd engine's
    # backward, merge.fold_helpers): launched by the engine, not by the user's Python
    engine: bool = False
    # in the backward function of an operator the script ran outside the model's calls (a loss):
    # compiling the model leaves it eager (threads.host_threads)
    outside: bool = False


@dataclass(slots=True)
class GpuOp:
    stream: Any  # (device, stream)
    kind: str  # k | c | s
    start: float
    dur: float
    name: str
    nbytes: float = 0.0
    copy: str | None = None  # HtoD_pageable, DtoH_pinned, ... for copies
    gemm: str | None = None  # fp32 | tensor_core | other for matmul kernels
    launch: int = -1  # index of the HostItem that queued it; -1: queued before the window
    ready_offset: float = 0.0  # from its launch call's start until it could start, us
    gap: float = 0.0  # the GPU's own gap after the stream's previous operation, us
    dep: int = -1  # an operation on another stream it was measured waiting for


HOST_FIELDS = ("kind", "thread", "ts", "dur", "tag", "ops", "scope", "waited", "post", "agent", "api", "read",
               "optimizer", "fused", "call", "engine", "outside")


@dataclass
class HostColumns:
    """Host items as one list per HostItem field, in order: what the replay reads, without an
    object per item (a window holds a hundred thousand)."""

    kind: list[int] = field(default_factory=list)
    thread: list[int] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    dur: list[float] = field(default_factory=list)
    tag: list[str] = field(default_factory=list)
    ops: list[list[int]] = field(default_factory=list)
    scope: list[Any] = field(default_factory=list)
    waited: list[bool] = field(default_factory=list)
    post: list[float] = field(default_factory=list)
    agent: list[bool] = field(default_factory=list)
    api: list[str] = field(default_factory=list)
    read: list[tuple[float, float] | None] = field(default_factory=list)
    optimizer: list[bool] = field(default_factory=list)
    fused: list[bool] = field(default_factory=list)
    call: list[int] = field(default_factory=list)
    engine: list[bool] = field(default_factory=list)
    outside: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.kind)

    @classmethod
    def of(cls, items: list[HostItem]) -> HostColumns:
        return cls(*(list(map(attrgetter(name), items)) for name in HOST_FIELDS))

    def items(self) -> list[HostItem]:
        return list(map(HostItem, *(getattr(self, name) for name in HOST_FIELDS)))

    def take(self, order: list[int]) -> HostColumns:
        """The items at `order`, in that order."""
        return HostColumns(*(list(map(getattr(self, name).__getitem__, order)) for name in HOST_FIELDS))

    def extend(self, other: HostColumns) -> None:
        for name in HOST_FIELDS:
            getattr(self, name).extend(getattr(other, name))
