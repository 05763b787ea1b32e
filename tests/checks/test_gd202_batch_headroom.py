"""GD202 batch-headroom on synthetic Sessions with known answers."""

from __future__ import annotations

import pytest
from helpers import make_gpu_samples, make_loader, make_session, run_check

from gpudoctor.checks.gd202_batch_headroom import round_start, run, script_target
from gpudoctor.session import AllocatorSnapshot, ErrorEvent, GpuInfo

GIB = 2**30
TOTAL = 80 * GIB


def snapshots(peak: float = 12, steady: float = 6, end: float = 4, reserved: float = 14, **kw) -> list:
    common = dict(max_allocated_bytes=int(peak * GIB), max_reserved_bytes=int(reserved * GIB),
                  device_total_bytes=TOTAL, **kw)
    return [
        AllocatorSnapshot(t=5.0, label="steady", allocated_bytes=int(steady * GIB),
                          reserved_bytes=int(reserved * GIB), **common),
        AllocatorSnapshot(t=30.0, label="end", allocated_bytes=int(end * GIB),
                          reserved_bytes=int(reserved * GIB), **common),
    ]


def headroom_session(batch: int | None = 32, allocator=None, util: float = 40.0, sm: float | None = 20.0, **kw):
    kw.setdefault("command", ["python", "train.py", "--lr", "1e-3"])
    session = make_session(gpu_samples=make_gpu_samples(20, util_percent=util, sm_activity=sm),
                           torch_cuda_used=True, batch_size=batch, **kw)
    session.allocator = snapshots() if allocator is None else allocator
    session.environment.gpus = [GpuInfo(index=0, uuid="GPU-0", name="NVIDIA A100", memory_total_bytes=TOTAL)]
    return session


def test_headroom_gives_the_bound_the_start_and_the_sweep_command():
    outcome, findings = run_check(run.check, headroom_session())
    assert outcome.status == "finding"
    (f,) = findings
    # baseline 4 GiB (lowest allocation), (12 - 4) GiB / 32 = 256 MiB per sample,
    # (0.9 * 80 - 4) GiB / 256 MiB = 272 samples; start at half: 136
    assert f.evidence["per_sample"].value == 256.0
    assert f.evidence["max_batch_estimate"].value == 272
    assert f.evidence["start_batch"].value == 136
    assert f.remedy.code == "gpudoctor sweep train.py:build --mode train --batch-sizes 136,272,544"
    assert f.severity == "warning"  # SM activity 20% < 50%
    assert "about 272 would fit" in f.title
    assert "do not grow with the batch" in f.message or "does not grow with the batch" in f.message
    assert "latency budget" in f.message
    assert f.estimated_gain is None


def test_no_batch_independent_part_assumes_everything_scales():
    flat = [AllocatorSnapshot(t=5.0, label="end", allocated_bytes=8 * GIB, reserved_bytes=9 * GIB,
                              max_allocated_bytes=8 * GIB, max_reserved_bytes=9 * GIB, device_total_bytes=TOTAL)]
    (f,) = run(headroom_session(batch=16, allocator=flat))
    # 8 GiB / 16 = 512 MiB per sample, 72 GiB / 512 MiB = 144, start 72
    assert f.evidence["max_batch_estimate"].value == 144
    assert f.remedy.code.endswith("--batch-sizes 72,144,288")
    assert "assumed to grow with the batch" in f.message and "conservative" in f.message


def test_batch_size_from_the_main_loader_and_module_command():
    session = headroom_session(batch=None, loaders=[make_loader(batch_size=64, batches=100)],
                               command=["python", "-m", "pkg.train"])
    (f,) = run(session)
    assert f.evidence["batch_size"].value == 64
    assert f.remedy.code.startswith("gpudoctor sweep pkg.train:build --mode train --batch-sizes ")


def test_no_gpm_uses_the_duty_cycle_and_is_info_when_half_busy():
    (f,) = run(headroom_session(util=70.0, sm=None))
    assert f.severity == "info"
    assert "utilization averaged 70%" in f.message


def test_memory_already_half_used_passes():
    outcome, findings = run_check(run.check, headroom_session(allocator=snapshots(peak=30, reserved=42)))
    assert outcome.status == "pass" and findings == []


def test_busy_gpu_passes():
    assert run(headroom_session(util=100.0, sm=92.0)) == []


def test_skipped_after_an_oom():
    session = headroom_session()
    session.errors = [ErrorEvent(pid=1, kind="oom", type="torch.OutOfMemoryError", message="CUDA out of memory.")]
    outcome, _ = run_check(run.check, session)
    assert outcome.status == "skipped" and "GD402" in (outcome.reason or "")


def test_skipped_without_batch_size():
    outcome, _ = run_check(run.check, headroom_session(batch=None))
    assert outcome.status == "skipped" and "batch size unknown" in (outcome.reason or "")


def test_skipped_without_allocator_statistics():
    session = headroom_session(allocator=[], unavailable={"allocator": "no CUDA caching-allocator statistics"})
    outcome, _ = run_check(run.check, session)
    assert outcome.status == "skipped" and "allocator" in (outcome.reason or "")


def test_helpers():
    assert round_start(272, 32) == 136
    assert round_start(50, 32) == 50  # half the bound is below the batch: try the bound
    assert round_start(13, 4) == 6
    assert script_target(["python3", "/home/u/proj/train.py"]) == "train.py:build"
    assert script_target(["torchrun", "--nproc-per-node", "8", "train.py"]) == "train.py:build"
    assert script_target(["bash", "run.sh"]) == "<your_module>.py:build"


# ---- the samples/s curve (gpudoctor.analysis.batch_scaling) ----
def _launch_bound_profile():
    from gpudoctor.session import ProfileSummary

    # 10 steps of 5.4 ms (syn_launch_bound's shape): 0.5 ms of kernels a step, the rest launches and Python
    return ProfileSummary(steps=10, kernel_total_us=5_000.0, gpu_busy_us=5_000.0, gpu_idle_us=49_000.0)


def _launch_bound(batch: int | None, sm: float = 1.1, util: float = 8.8):
    from helpers import make_steps

    session = headroom_session(batch=batch, util=util, sm=sm, steps=make_steps(1000, 0.0054),
                               profile=_launch_bound_profile(), step_source="optimizer")
    session.allocator = snapshots(peak=0.08, steady=0.02, end=0.02, reserved=0.1)
    return session


def test_an_idle_launch_bound_gpu_without_a_known_batch_gets_the_curve_in_multiples():
    (f,) = run(_launch_bound(batch=None))
    p = f.prediction
    assert p is not None and p.method == "model"
    # kernels fill 1.1 / 8.8 = 12.5% of the SMs: at 16x, 0.5 ms * (1 + 0.125 * 15) = 1.4 ms, under the 5.4 ms step
    assert p.gain_at(16) == pytest.approx(16.0, rel=1e-3)
    # at 128x the kernels (0.5 ms * (1 + 0.125 * 127) = 8.44 ms) outgrow the 5.4 ms host: 128 * 5.4 / 8.44;
    # doubling again buys under 5% (84.1x): the knee, the multiple the finding names
    assert p.batch_multiple == 128 and p.gain == pytest.approx(128 * 5.4 / 8.4375, rel=1e-3)
    assert f.severity == "info"  # the batch size was not seen: a note beside the causes, explaining none
    assert "More samples per step" in f.title and "16x: 16.00x" in f.message
    assert f.evidence["max_multiple"].value > 1000  # 0.06 GiB of 72 GiB scales


def test_a_known_batch_names_the_batch_and_its_gain():
    (f,) = run(_launch_bound(batch=64))
    assert f.prediction is not None and f.prediction.batch_curve
    multiple = f.prediction.batch_multiple
    assert f"batch {round(64 * multiple)} predicted" in f.title
    assert f.severity == "critical"  # severity follows the predicted gain, as for every finding


def test_without_the_batch_size_a_busy_or_gpu_bound_step_gets_no_finding():
    assert run(_launch_bound(batch=None, sm=60.0, util=70.0)) == []  # not idle: busy above GD201's 50% line
    assert run(_launch_bound(batch=None, sm=8.8, util=8.8)) != []  # idle by the samples ...
    gpu_bound = _launch_bound(batch=None, sm=8.8, util=8.8)
    gpu_bound.profile.kernel_total_us = 54_000.0  # ... but the profile says the GPU is the step
    assert run(gpu_bound) == []
