"""Builders for synthetic Sessions with known answers, shared by the test modules.

Everything here is deliberately small and explicit: a test states the numbers it
depends on (step time, data wait, per-batch cost, cores) and the builders fill in
the rest the way the real session builder would, including `Session.unavailable`
for facts that were not recorded ("not measured" is never zero).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from gpudoctor.model import Check, CheckOutcome, Finding
from gpudoctor.session import (
    CpuInfo,
    CpuSample,
    Environment,
    GpuSample,
    LoaderInfo,
    ProfileSummary,
    Session,
    StepRecord,
    Steps,
    StorageProbe,
)
from gpudoctor.verdict.engine import run_checks

MISSING_REASONS = {
    "loader": "no DataLoader was iterated",
    "steps": "no step boundaries",
    "cpu": "no CPU samples",
    "storage": "no dataset path known",
    "gpu": "no NVIDIA GPU",
    "profile": "no profiler window",
}


def make_steps(n: int, duration_s: float, data_wait_s: float = 0.0, *, start_t: float = 0.0) -> list[StepRecord]:
    """`n` identical steps back to back; `t` is the end of each step in session time."""
    records = []
    t = start_t
    for _ in range(n):
        t += duration_s
        records.append(StepRecord(t=t, duration_s=duration_s, data_wait_s=data_wait_s))
    return records


def make_loader(
    *,
    num_workers: int = 0,
    batches: int = 100,
    pid: int = 1000,
    index: int = 0,
    fetch_s_per_batch: float | None = None,
    fetch_cpu_ratio: float | None = None,
    **fields: Any,
) -> LoaderInfo:
    """A DataLoader record; `fetch_s_per_batch` and `fetch_cpu_ratio` fill the fetch totals.

    Without `fetch_s_per_batch` the per-batch cost is left unmeasured (fetch_batches=0).
    """
    loader = LoaderInfo(loader_id=f"{pid}:{index}", pid=pid, num_workers=num_workers, batches=batches, **fields)
    if fetch_s_per_batch is not None:
        loader.fetch_batches = batches
        loader.fetch_wall_s = fetch_s_per_batch * batches
        ratio = 1.0 if fetch_cpu_ratio is None else fetch_cpu_ratio
        loader.fetch_cpu_s = loader.fetch_wall_s * ratio
    return loader


def make_cpu_samples(n: int = 20, *, interval_s: float = 0.25, start_t: float = 0.0, **fields: Any) -> list[CpuSample]:
    """`n` identical CPU samples; pass CpuSample fields (system_percent=..., main_thread_percent=...)."""
    fields.setdefault("system_percent", 10.0)
    return [CpuSample(t=start_t + (i + 1) * interval_s, **fields) for i in range(n)]


def make_gpu_samples(n: int = 20, *, interval_s: float = 0.25, start_t: float = 0.0, gpu_index: int = 0,
                     **fields: Any) -> list[GpuSample]:
    return [GpuSample(t=start_t + (i + 1) * interval_s, gpu_index=gpu_index, **fields) for i in range(n)]


def make_session(
    *,
    steps: list[StepRecord] | None = None,
    warmup_steps: int = 0,
    step_source: str = "loader",
    step_count: int | None = None,
    loaders: Iterable[LoaderInfo] = (),
    cpu_samples: Iterable[CpuSample] = (),
    gpu_samples: Iterable[GpuSample] = (),
    storage: Iterable[StorageProbe] = (),
    profile: ProfileSummary | None = None,
    usable_cores: float | None = None,
    logical_cores: int | None = None,
    affinity_cores: int | None = None,
    cgroup_quota_cores: float | None = None,
    torch_cuda_used: bool | None = None,
    unavailable: dict[str, str] | None = None,
    mark_missing: bool = True,
    **fields: Any,
) -> Session:
    """A synthetic Session (source="synthetic").

    With `mark_missing`, facts without data are recorded in `Session.unavailable`
    as the real session builder does, so the engine skips checks that require them.
    """
    records = list(steps or [])
    loader_list = list(loaders)
    cpu = list(cpu_samples)
    gpu = list(gpu_samples)
    probes = list(storage)
    fields.setdefault("duration_s", records[-1].t if records else 0.0)
    session = Session(
        source="synthetic",
        environment=Environment(cpu=CpuInfo(
            logical_cores=logical_cores,
            affinity_cores=affinity_cores,
            cgroup_quota_cores=cgroup_quota_cores,
            usable_cores=usable_cores,
        )),
        loaders=loader_list,
        steps=Steps(
            source=step_source if records else None,
            count=len(records) if step_count is None else step_count,
            records=records,
            warmup_steps=warmup_steps,
        ),
        cpu_samples=cpu,
        gpu_samples=gpu,
        storage=probes,
        profile=profile,
        torch_cuda_used=torch_cuda_used,
        unavailable=dict(unavailable or {}),
        **fields,
    )
    if mark_missing:
        present = {
            "loader": bool(loader_list),
            "steps": bool(records),
            "cpu": bool(cpu),
            "storage": bool(probes),
            "gpu": bool(gpu) or bool(torch_cuda_used),
            "profile": profile is not None,
        }
        for fact, ok in present.items():
            if not ok:
                session.unavailable.setdefault(fact, MISSING_REASONS[fact])
    return session


def run_check(check: Check, session: Session) -> tuple[CheckOutcome, list[Finding]]:
    """Run one check through the engine: (its outcome, its findings)."""
    result = run_checks(session, [check])
    return result.outcomes[0], result.findings


CORPUS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "corpus"


def load_corpus_module(name: str) -> ModuleType:
    """A module of benchmarks/corpus/ (not a package: its modules import each other by name, so
    their folder goes on sys.path), registered in sys.modules (dataclasses look their module up there)."""
    sys.path.insert(0, str(CORPUS_DIR))
    spec = importlib.util.spec_from_file_location(f"corpus_{name}", CORPUS_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
