"""What the probes read from: NVML facts, torch's build, the environment, the policy,
and the filesystem roots (replaceable, so tests use fake sysfs trees)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoctor.preflight.gpu_facts import GpuFacts, NvmlFacts
from gpudoctor.preflight.model import Unread
from gpudoctor.preflight.policy import Policy

log = logging.getLogger(__name__)


@dataclass
class TorchFacts:
    version: Any  # "2.11.0" or Unread (torch not importable)
    cuda: Any = None  # torch.version.cuda: "12.8", None for CPU-only builds, Unread
    hip: Any = None  # torch.version.hip (ROCm builds)
    device_count: Any = None  # torch.cuda.device_count(), or Unread
    sharing_strategy: Any = None  # torch.multiprocessing's, or Unread


def read_torch() -> TorchFacts:
    """torch's build and what it sees. device_count() asks the driver for the count
    without creating a context, so the GPUs stay untouched."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001  (ImportError, or a broken install raising anything)
        return TorchFacts(version=Unread(f"torch is not importable: {type(exc).__name__}: {exc}"))
    facts = TorchFacts(version=str(torch.__version__))
    facts.cuda = getattr(torch.version, "cuda", None)
    facts.hip = getattr(torch.version, "hip", None)
    if facts.cuda is None:
        facts.device_count = Unread("torch is built without CUDA")
    else:
        try:
            facts.device_count = int(torch.cuda.device_count())
        except Exception as exc:  # noqa: BLE001  (a broken torch costs only this fact)
            facts.device_count = Unread(f"torch.cuda.device_count() failed: {type(exc).__name__}: {exc}")
    try:
        import torch.multiprocessing as tmp

        facts.sharing_strategy = tmp.get_sharing_strategy()  # type: ignore[no-untyped-call, unused-ignore]
    except Exception as exc:  # noqa: BLE001  (a broken torch costs only this fact)
        facts.sharing_strategy = Unread(f"{type(exc).__name__}: {exc}")
    return facts


@dataclass
class Context:
    nvml: NvmlFacts
    torch: TorchFacts
    policy: Policy = field(default_factory=Policy)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    sys_root: Path = Path("/sys")  # sysfs
    shm_path: Path = Path("/dev/shm")
    checkpoint_dir: Path = Path(".")
    pid: int = field(default_factory=os.getpid)
    visible: list[GpuFacts] = field(default_factory=list)  # the GPUs CUDA_VISIBLE_DEVICES leaves
    visibility_problem: str | None = None  # an entry CUDA cannot resolve, or all hidden
    links_under_load: dict[int, Any] = field(default_factory=dict)  # NVML index -> LinkUnderLoad (job runs)

    def __post_init__(self) -> None:
        self.visible, self.visibility_problem = visible_gpus(self.nvml.gpus, self.environ.get("CUDA_VISIBLE_DEVICES"))

    @property
    def gpu_label(self) -> str:
        return "GPU" if len(self.visible) == 1 else "GPUs"


def visible_gpus(gpus: list[GpuFacts], raw: str | None) -> tuple[list[GpuFacts], str | None]:
    """The GPUs a CUDA program started here would use, and what is wrong with the
    variable if anything. CUDA stops at the first entry it cannot resolve; indices are
    CUDA's order, which is NVML's (PCI) order on machines of identical GPUs."""
    if raw is None:
        return list(gpus), None
    chosen: list[GpuFacts] = []
    tokens = [t.strip() for t in raw.split(",")]
    for position, token in enumerate(tokens):
        if token.isdigit():
            match = [g for g in gpus if g.index == int(token)]
        elif token.upper().startswith("MIG-"):
            return chosen or list(gpus), None  # a MIG instance: its parent is not resolved here
        else:
            key = token.lower() if token.upper().startswith("GPU-") else "gpu-" + token.lower()
            match = [g for g in gpus if g.uuid.lower().startswith(key)] if token else []
        if len(match) != 1:
            if not token and position == 0:
                return [], "it is empty: CUDA sees no GPU"
            rest = ", ".join(tokens[position:])
            why = "matches several GPUs" if len(match) > 1 else "names no GPU"
            return chosen, f"entry {token!r} {why}: CUDA ignores it and everything after it ({rest})"
        if match[0] in chosen:
            return chosen, f"entry {token!r} repeats a GPU: CUDA ignores it and everything after it"
        chosen.append(match[0])
    return chosen, None
