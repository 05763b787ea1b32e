"""Synthetic Sessions and report dicts for the renderer tests (clearly synthetic:
source "synthetic", a made-up CPU model, GPU UUID "GPU-synthetic-0").

Sessions and engine results are built by hand, then turned into the report dict by
the real gpudoctor.verdict.build.build_report, so the renderers see exactly what they
will see in production.
"""

from __future__ import annotations

import math
from typing import Any

from gpudoctor.model import CheckOutcome, Evidence, Finding, Remedy
from gpudoctor.session import (
    AllocatorSnapshot,
    CallSite,
    CpuInfo,
    CpuSample,
    Environment,
    ErrorEvent,
    GpuInfo,
    GpuSample,
    KernelStat,
    LoaderInfo,
    ProcessInfo,
    ProfileSummary,
    Session,
    StepRecord,
    Steps,
    StorageProbe,
    SyncSite,
)
from gpudoctor.verdict.build import build_report
from gpudoctor.verdict.engine import EngineResult, order

DOCS = {
    "GD102": "Input pipeline stall.\n\nThe training loop waits for the DataLoader a large share of each step.",
    "GD201": "GPU idle or SMs barely used.\n\nNVML utilization is a duty cycle; SM activity is the real work.",
}


def make_session(
    *,
    duration_s: float = 60.0,
    sample_interval_s: float = 0.5,
    steps: int = 500,
    command: list[str] | None = None,
    gpu_name: str = "NVIDIA H200",
    with_gpu: bool = True,
    with_profile: bool = True,
    hostile: str = "",
) -> Session:
    """A run of `duration_s` with samples every `sample_interval_s` and `steps` steps.
    `hostile` is planted in every string a run can contribute to a report."""
    step_time = duration_s / max(steps, 1)
    records = [
        StepRecord(t=(i + 1) * step_time, duration_s=step_time, data_wait_s=step_time * (0.55 + 0.1 * math.sin(i / 7)))
        for i in range(steps)
    ]
    n_samples = int(duration_s / sample_interval_s)
    cpu = [
        CpuSample(
            t=i * sample_interval_s,
            system_percent=40 + 20 * math.sin(i / 11),
            tree_percent=300.0,
            main_thread_percent=95.0,
            workers_percent=180.0,
        )
        for i in range(n_samples)
    ]
    gpu = [
        GpuSample(
            t=i * sample_interval_s,
            gpu_index=0,
            util_percent=35 + 15 * math.sin(i / 5),
            sm_activity=8 + 4 * math.sin(i / 5),
            tensor_activity=3.0,
            power_w=180 + 20 * math.sin(i / 9),
            memory_used_bytes=int(20e9 + 1e8 * (i % 10)),
        )
        for i in range(n_samples)
    ] if with_gpu else []
    profile = ProfileSummary(
        steps=10,
        window_s=1.2,
        kernel_count=4200,
        kernel_total_us=310_000.0,
        kernel_duration_hist={"<10us": 2900, "10-100us": 1100, "100us-1ms": 180, ">1ms" + hostile: 20},
        kernel_median_us=6.5,
        gpu_busy_us=380_000.0,
        gpu_idle_us=820_000.0,
        launch_count=4200,
        launch_total_us=29_000.0,
        short_kernel_count=2500,
        top_kernels=[KernelStat("ampere_sgemm_128x64_nn" + hostile, 300, 120_000.0, 400.0, 900.0),
                     KernelStat("vectorized_elementwise_kernel", 2000, 40_000.0, 20.0, 55.0)],
        top_ops=[KernelStat("aten::mm", 300, 125_000.0, 416.0, 950.0)],
        memcpy={"HtoD": {"count": 20, "bytes": 2.0e8, "us": 15_000.0}},
        sync_count=12,
        sync_total_us=4_000.0,
        sync_sites=[SyncSite("aten::item", 10, 3_000.0, "train.py:42" + hostile)],
        matmul_fp32_us=120_000.0,
        matmul_total_us=125_000.0,
        tf32_enabled=False,
        error=("partial window" + hostile) if hostile else None,
        label="start",
        index=1,
        step_source="loader",
        phase="DataLoader batches, DataLoader 100:1" + hostile + ", with gradients, on CUDA",
        window_start_s=12.0,
        window_end_s=13.2,
        top_cpu_ops=[KernelStat("aten::addmm" + hostile, 300, 60_000.0, 200.0, 500.0),
                     KernelStat("aten::copy_", 40, 9_000.0, 225.0, 400.0)],
        call_sites=[CallSite("train_step (train.py:40)" + hostile, gpu_us=280_000.0, launches=4000,
                             blocked_us=3_000.0, syncs=10, cpu_us=90_000.0),
                    CallSite("(autograd engine: backward)", gpu_us=100_000.0, launches=200, cpu_us=20_000.0)],
    ) if with_profile else None
    unavailable: dict[str, str] = (
        {} if with_gpu else {"gpu": "no NVIDIA driver found", "gpm": "no GPU", "allocator": "no CUDA device used"}
    )
    if not with_profile:
        unavailable["profile"] = "CPU-only run"
    if hostile:
        unavailable["gpm"] = "not supported" + hostile
    return Session(
        tool_version="0.1.0",
        command=command or ["python", "train.py", "--epochs", "3"] + ([hostile] if hostile else []),
        started_at="2025-01-01T12:00:00+00:00",
        duration_s=duration_s,
        exit_code=0,
        stop_reason="exited",
        source="synthetic",
        environment=Environment(
            python="3.11.7",
            platform="Linux-6.8-x86_64",
            torch="2.11.0+cu128",
            cuda="12.8",
            driver="580.65.06" if with_gpu else None,
            cpu=CpuInfo(logical_cores=16, physical_cores=8, affinity_cores=16, usable_cores=8.0,
                        model="Synthetic CPU @ 3.0GHz"),
            gpus=[GpuInfo(index=0, uuid="GPU-synthetic-0", name=gpu_name + hostile, memory_total_bytes=150_000_000_000,
                          power_limit_w=700.0, gpm_supported=True)] if with_gpu else [],
            host_memory_total_bytes=128 * 2**30,
        ),
        processes=[ProcessInfo(pid=100, argv=["python", "train.py"], role="main")],
        loaders=[LoaderInfo(loader_id="100:1", pid=100, num_workers=2, batch_size=64, pin_memory=False,
                            dataset_class="ImageFolder" + hostile, dataset_root="data/train" + hostile, batches=steps,
                            wait_total_s=sum(r.data_wait_s for r in records), fetch_batches=steps,
                            fetch_wall_s=steps * 0.2, fetch_cpu_s=steps * 0.19)],
        steps=Steps(source="optimizer", count=steps, records=records, warmup_steps=min(3, steps)),
        batch_size=64,
        cpu_samples=cpu,
        cpu_sample_interval_s=sample_interval_s,
        gpu_samples=gpu,
        gpu_sample_interval_s=sample_interval_s if with_gpu else None,
        profile=profile,
        profiles=[profile] if profile is not None else [],
        allocator=[AllocatorSnapshot(t=30.0, label="steady", allocated_bytes=18 * 2**30, reserved_bytes=22 * 2**30,
                                     inactive_split_bytes=2**30, max_allocated_bytes=19 * 2**30,
                                     device_total_bytes=140 * 2**30)] if with_gpu else [],
        unavailable=unavailable,
        storage=[StorageProbe(path="data/train" + hostile, fs_type="ext4", kind="local", read_latency_p50_ms=0.4,
                              read_latency_p95_ms=2.0, throughput_mb_s=900.0)],
        errors=[ErrorEvent(pid=100, kind="exception", type="RuntimeError", message="boom" + hostile,
                           traceback="Traceback (most recent call last):\n  File \"train.py\"" + hostile)]
        if hostile else [],
        notes=["synthetic session for tests" + hostile],
    )


def make_result(*, hostile: str | None = None) -> EngineResult:
    text = hostile or ""
    findings = [
        Finding("warning", "GPU SMs barely used", f"SM activity 8% while utilization read 35%.{text}",
                evidence={"sm_activity": Evidence(8.0, "%", "steady steps 4-500", "SM activity")}, id="GD201", stage=2),
        Finding("critical", "The training loop waits for data", f"The loop waited 62% of each step.{text}",
                evidence={"data_wait_share": Evidence(0.62, "share", "steady steps 4-500", "data wait"),
                          "step_time": Evidence(0.12, "s", "steady steps 4-500", "median step time")},
                remedy=Remedy(f"Raise num_workers to 8 and pin memory.{text}",
                              f"DataLoader(ds, num_workers=8, pin_memory=True)  # {text}"),
                estimated_gain=2.4, id="GD102", stage=1),
        Finding("info", "Matmuls run in full fp32", "TF32 is off.",
                remedy=Remedy("Enable TF32.", "torch.backends.cuda.matmul.allow_tf32 = True"),
                estimated_gain=1.3, id="GD304", stage=3),
    ]
    outcomes = [
        CheckOutcome("GD101", "workers", 1, "DataLoader workers", "pass"),
        CheckOutcome("GD102", "input-stall", 1, "Input pipeline stall", "finding"),
        CheckOutcome("GD104", "storage", 1, "Slow storage", "skipped", f"storage: no dataset path known{text}"),
        CheckOutcome("GD201", "gpu-idle", 2, "GPU idle", "finding"),
        CheckOutcome(
            "GD301", "launch-bound", 3, "Launch-bound", "error", "check failed: ZeroDivisionError: division by zero"
        ),
        CheckOutcome("GD304", "fp32-matmul", 3, "fp32 matmuls", "finding"),
    ]
    return EngineResult(findings=order(findings), outcomes=outcomes)


def make_report(session: Session | None = None, result: EngineResult | None = None, **kw: Any) -> dict[str, Any]:
    return build_report(session or make_session(), result or make_result(), docs=kw.pop("docs", DOCS), **kw)
