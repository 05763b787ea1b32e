"""Preflight fixtures: a Context built from a fake pynvml and a fake sysfs (preflight_helpers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from preflight_helpers import CUDA_TORCH, FakeNvml, idle_gpu, sysfs

from gpudoctor.preflight import gpu_facts
from gpudoctor.preflight.context import Context, TorchFacts
from gpudoctor.preflight.policy import Policy


@pytest.fixture
def make_ctx(tmp_path: Path) -> Callable[..., Context]:
    def make(gpus: list[Any] | None = None, *, environ: dict[str, str] | None = None, policy: Policy | None = None,
             torch: TorchFacts | None = None, sys_root: Path | None = None, nvml_kwargs: dict[str, Any] | None = None,
             **kwargs: Any) -> Context:
        gpus = [idle_gpu()] if gpus is None else gpus
        facts = gpu_facts.read(FakeNvml(gpus, **(nvml_kwargs or {})))
        return Context(nvml=facts, torch=torch or CUDA_TORCH, policy=policy or Policy(), environ=environ or {},
                       sys_root=sys_root or sysfs(tmp_path / "sys"), **kwargs)

    return make
