"""The remedies `diagnose --try` can apply from outside the code, and how `--try-only` names them.

Each becomes an override the agent applies when the workload imports torch
(gpudoctor/agent/overrides.py), or an environment variable the supervisor sets:

    workers              DataLoader num_workers (GD101/GD102's number) + persistent_workers=True
                         (+ prefetch_factor when batches mostly wait on I/O); workers=N to choose
    pin_memory           DataLoader pin_memory=True
    persistent_workers   DataLoader persistent_workers=True
    prefetch             DataLoader prefetch_factor (prefetch=N; default 4)
    tf32                 torch.set_float32_matmul_precision("high"): TF32 matmuls (changes numerics)
    cudnn_benchmark      torch.backends.cudnn.benchmark = True
    expandable_segments  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, merged with the existing value
    compile              torch.compile of the outermost module (opt-in; changes numerics); compile=BACKEND
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError


@dataclass(frozen=True)
class RemedyKind:
    name: str
    numerics_change: bool  # results may differ in the last bits
    auto: bool  # part of a bare --try (compile is opt-in)
    what: str
    # the agent's override that applies it (gpudoctor/agent/overrides.py: "env", "tf32", "loader", ...),
    # when it does not depend on the run; None: the trial planner computes it (gpudoctor.trials.plan)
    override: Mapping[str, Any] | None = field(default=None, compare=False)


KINDS: dict[str, RemedyKind] = {k.name: k for k in (
    RemedyKind("workers", False, True, "DataLoader num_workers (the number GD101/GD102 computed)"),
    RemedyKind("pin_memory", False, True, "DataLoader pin_memory=True"),
    RemedyKind("persistent_workers", False, False, "DataLoader persistent_workers=True"),
    RemedyKind("prefetch", False, False, "DataLoader prefetch_factor"),
    RemedyKind("tf32", True, True, "TF32 matmuls: torch.set_float32_matmul_precision('high')", {"tf32": True}),
    RemedyKind("cudnn_benchmark", False, True, "torch.backends.cudnn.benchmark = True", {"cudnn_benchmark": True}),
    RemedyKind("expandable_segments", False, True, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    RemedyKind("compile", True, False, "torch.compile of the outermost module (opt-in)"),
)}
DEFAULT_PREFETCH = 4


def register(kind: RemedyKind) -> RemedyKind:
    """Make a remedy kind known to --try-only and the trial planner (a check's ``Fix(kind.name)``
    then applies it); a kind of its own needs a fixed ``override``. Registering the same kind
    again is harmless; another kind under a taken name is an error."""
    known = KINDS.get(kind.name)
    if known is not None and known != kind:
        raise ValueError(f"remedy kind {kind.name!r} is already registered")
    if kind.override is None and known is None:
        raise ValueError(f"remedy kind {kind.name!r}: a registered kind declares its override")
    KINDS[kind.name] = kind
    return kind
ALLOC_VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")  # the newer name wins when set


@dataclass(frozen=True)
class TryRequest:
    """What the user asked for: every applicable remedy (auto) and/or named ones (with values)."""

    auto: bool
    named: dict[str, str | None] = field(default_factory=dict)  # name -> value ("workers=4" -> "4")

    @property
    def requested(self) -> list[str]:
        names = ["auto"] if self.auto else []
        return names + [f"{k}={v}" if v is not None else k for k, v in self.named.items()]

    def wants(self, name: str) -> bool:
        return name in self.named or (self.auto and KINDS[name].auto)


def parse_try(try_all: bool, only: str | None) -> TryRequest | None:
    """--try / --try-only LIST into a request (None: no trials). Raises GpudoctorError(USAGE)."""
    if not try_all and not only:
        return None
    auto = try_all and not only
    named: dict[str, str | None] = {}
    for item in (only or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if name == "auto":
            auto = True
            continue
        if name not in KINDS:
            raise GpudoctorError(f"--try-only: unknown remedy {name!r} (choose from auto, {', '.join(KINDS)})",
                                 exitcodes.USAGE)
        if value and name in ("workers", "prefetch") and not (value.isdigit() and int(value) >= (name == "prefetch")):
            raise GpudoctorError(f"--try-only: {name}={value}: expected a whole number", exitcodes.USAGE)
        named[name] = value.strip() or None
    if not auto and not named:
        raise GpudoctorError("--try-only needs at least one remedy (e.g. workers,tf32 or auto)", exitcodes.USAGE)
    return TryRequest(auto=auto, named=named)


def label(override: Mapping[str, Any]) -> str:
    """What a trial changed, in the words a user would write: 'num_workers=8, persistent_workers=True'."""
    parts = []
    loader = override.get("loader") or {}
    for key in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor"):
        if key in loader:
            parts.append(f"{key}={loader[key]}")
    if override.get("tf32"):
        parts.append('float32_matmul_precision="high" (TF32)')
    if override.get("cudnn_benchmark"):
        parts.append("cudnn.benchmark=True")
    for name, value in (override.get("env") or {}).items():
        parts.append(f"{name}={value}")
    compile_spec = override.get("compile")
    if compile_spec:
        options = (
            ", ".join(f'{k}="{v}"' for k, v in compile_spec.items() if v) if isinstance(compile_spec, dict) else ""
        )
        parts.append(f"torch.compile(model{', ' + options if options else ''})")
    return ", ".join(parts) or "nothing"


def alloc_conf_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """expandable_segments:True merged into the allocator setting the user already has."""
    environ = os.environ if environ is None else environ
    name = next((n for n in ALLOC_VARIABLES if environ.get(n)), "PYTORCH_CUDA_ALLOC_CONF")
    items = [item.strip() for item in environ.get(name, "").split(",") if item.strip()]
    items = [item for item in items if item.split(":", 1)[0].strip() != "expandable_segments"]
    items.append("expandable_segments:True")
    return {name: ",".join(items)}
