"""What a Timeline is made of: host items (per thread) and GPU operations (per stream)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CPU, LAUNCH, SYNC, BLOCKING_COPY = 0, 1, 2, 3
# CPU item tags: Python in torch or another library (framework glue), operator dispatch of
# GPU work, a DataLoader wait, and Python in the user's own frames (with_stack traces only)
PYTHON, DISPATCH, DATA, USER = "python", "dispatch", "data", "user"


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
    optimizer: bool = False  # inside an optimizer's step(): what a fused optimizer replaces, not a compiler


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
