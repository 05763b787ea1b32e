"""PF1xx/PF2xx against a fake pynvml: each item's pass, its failure, and not-checked when NVML cannot say."""

from __future__ import annotations

import pynvml
import pytest
from preflight_helpers import CUDA_TORCH, FakeNvml, idle_gpu, sysfs

from gpudoctor.preflight import gpu, gpu_facts, health
from gpudoctor.preflight.context import TorchFacts
from gpudoctor.preflight.model import Unread
from gpudoctor.preflight.policy import Policy

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


def by_id(results):
    return {r.id: r for r in results}


def test_a_healthy_idle_h200_passes_every_gpu_item(make_ctx) -> None:
    results = by_id([*gpu.probe(make_ctx()), *health.probe(make_ctx())])
    assert {i: r.status for i, r in results.items()} == dict.fromkeys(results, "pass")
    assert results["PF101"].found == "driver 580.159.04 supports CUDA 13.0; torch 2.11.0+cu130 built for CUDA 13.0"
    assert results["PF103"].found == "GPU 0: enabled"
    assert "0 rows remapped" in results["PF202"].found


def test_no_nvml_makes_every_gpu_item_not_checked_with_the_reason() -> None:
    from gpudoctor.preflight.context import Context

    facts = gpu_facts.read(FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    ctx = Context(nvml=facts, torch=CUDA_TORCH, environ={})
    for result in [*gpu.probe(ctx), *health.probe(ctx)]:
        assert result.status == "not-checked", result
        assert "libnvidia-ml.so.1" in (result.reason or ""), result


@pytest.mark.parametrize("driver, torch_cuda, status", [
    (13000, "13.0", "pass"), (12080, "12.6", "pass"), (12020, "12.8", "warn"), (12080, "13.0", "fail"),
])
def test_driver_cuda_versions(make_ctx, driver: int, torch_cuda: str, status: str) -> None:
    torch = TorchFacts(version="2.11.0", cuda=torch_cuda, device_count=1)
    result = gpu.driver_cuda(make_ctx(nvml_kwargs={"cuda_driver_version": driver}, torch=torch))
    assert result.status == status, result.found


def test_driver_cuda_is_not_checked_for_a_cpu_torch(make_ctx) -> None:
    result = gpu.driver_cuda(make_ctx(torch=TorchFacts(version="2.11.0+cpu", cuda=None)))
    assert result.status == "not-checked" and "PF505" in (result.reason or "")


def test_gpus_visible_counts_pci_nvml_and_torch(make_ctx, tmp_path) -> None:
    root = sysfs(tmp_path / "s", gpus={"0000:18:00.0": 0, "0000:19:00.0": 0})
    two = [idle_gpu(0), idle_gpu(1)]
    assert (
        gpu.gpus_visible(make_ctx(two, sys_root=root, torch=TorchFacts("2.11", "13.0", device_count=2))).status
        == "pass"
    )
    # a GPU on the bus that NVML does not list: lost, or a container given some GPUs
    lost = gpu.gpus_visible(make_ctx([idle_gpu(0)], sys_root=root, torch=CUDA_TORCH))
    assert lost.status == "warn" and "PCI bus 2, NVML 1" in lost.found
    # torch sees fewer than CUDA_VISIBLE_DEVICES leaves
    short = gpu.gpus_visible(make_ctx(two, sys_root=root, torch=TorchFacts("2.11", "13.0", device_count=1)))
    assert short.status == "fail" and "torch sees 1 of the 2" in short.found
    cvd = gpu.gpus_visible(make_ctx(two, sys_root=root, environ={"CUDA_VISIBLE_DEVICES": "1"}, torch=CUDA_TORCH))
    assert cvd.status == "pass" and "CUDA_VISIBLE_DEVICES leaves 1" in cvd.found


def test_gpus_on_the_bus_without_nvml_fail(tmp_path) -> None:
    from gpudoctor.preflight.context import Context

    facts = gpu_facts.read(FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    ctx = Context(nvml=facts, torch=CUDA_TORCH, environ={}, sys_root=sysfs(tmp_path, gpus={"0000:18:00.0": 0}))
    result = gpu.gpus_visible(ctx)
    assert result.status == "fail" and "driver not loaded" in result.found


def test_persistence_off_warns_and_the_policy_makes_it_fail(make_ctx) -> None:
    gpus = [idle_gpu(0), idle_gpu(1, persistence=0)]
    result = gpu.persistence(make_ctx(gpus))
    assert result.status == "warn" and result.found == "GPU 1: disabled (the other 1 pass)"
    assert gpu.persistence(make_ctx(gpus, policy=Policy(require_persistence_mode=True))).status == "fail"


def test_mig(make_ctx) -> None:
    assert gpu.mig(make_ctx([idle_gpu(mig=True)])).status == "warn"
    assert gpu.mig(make_ctx([idle_gpu()])).found == "GPU 0: off (not MIG-capable)"


def test_other_processes_fail_foreign_memory_warns(make_ctx) -> None:
    busy = gpu.processes(make_ctx([idle_gpu(processes=[(4242, 30 * 2**30)])]))
    assert busy.status == "fail" and "pid 4242 (30.0 GiB)" in busy.found
    hidden = gpu.processes(make_ctx([idle_gpu(memory_used=20 * 2**30)]))
    assert hidden.status == "warn" and "another container" in hidden.found
    mine = gpu.processes(make_ctx([idle_gpu(processes=[(777, 2**20)])], pid=777))
    assert mine.status == "pass"


def test_process_listing_not_permitted_is_not_checked(make_ctx) -> None:
    fail = {"nvmlDeviceGetComputeRunningProcesses": pynvml.NVML_ERROR_NO_PERMISSION,
            "nvmlDeviceGetGraphicsRunningProcesses": pynvml.NVML_ERROR_NO_PERMISSION}
    result = gpu.processes(make_ctx([idle_gpu(fail=fail)]))
    assert result.status == "not-checked" and "no permission" in (result.reason or "")


@pytest.mark.parametrize("changes, status, text", [
    ({"ecc_volatile_uncorrected": 2}, "fail", "2 uncorrectable ECC errors"),
    ({"ecc_aggregate_uncorrected": 5}, "warn", "5 uncorrectable over the GPU's life"),
    ({"ecc_mode": (0, 1)}, "warn", "ECC disabled (enabled after the next reset)"),
    ({"ecc_mode": None}, "not-checked", "ECC not supported on NVIDIA H200"),
])
def test_ecc(make_ctx, changes, status, text) -> None:
    result = health.ecc(make_ctx([idle_gpu(**changes)]))
    assert result.status == status
    assert text in (result.reason if status == "not-checked" else result.found)


@pytest.mark.parametrize("changes, status", [
    ({"remapped_rows": (3, 1, 1, 0)}, "fail"), ({"remapped_rows": (0, 0, 0, 1)}, "fail"),
    ({"remapped_rows": (2, 1, 0, 0)}, "pass"),
    ({"remapped_rows": None, "retired_pending": 1}, "fail"), ({"remapped_rows": None}, "pass"),
    ({"remapped_rows": None, "retired_pending": None}, "not-checked"),
])
def test_memory_remap(make_ctx, changes, status) -> None:
    assert health.remap(make_ctx([idle_gpu(**changes)])).status == status


@pytest.mark.parametrize("reasons, util, status", [
    (0x1, 0, "pass"), (0x8 | 0x1, 0, "fail"), (0x40, 0, "fail"), (0x80, 0, "fail"), (0x4, 0, "warn"), (0x4, 90, "pass"),
])
def test_clock_events_at_idle(make_ctx, reasons: int, util: int, status: str) -> None:
    assert health.clock_events(make_ctx([idle_gpu(reasons=reasons, util_gpu=util)])).status == status


def test_power_limit(make_ctx) -> None:
    capped = [idle_gpu(power_limit_mw=500_000)]
    result = health.power_limit(make_ctx(capped))
    assert result.status == "warn" and result.found == "GPU 0: 500 W of the default 700 W (capped)"
    assert health.power_limit(make_ctx(capped, policy=Policy(min_power_limit_share=0.9))).status == "fail"
    assert health.power_limit(make_ctx(capped, policy=Policy(min_power_limit_share=0.7))).status == "pass"


def test_application_clocks(make_ctx) -> None:
    assert health.app_clocks(make_ctx([idle_gpu(app_clocks={1: 1400, 2: 3201})])).status == "warn"
    unsupported = health.app_clocks(make_ctx([idle_gpu(app_clocks=None)]))
    assert unsupported.status == "not-checked" and "not supported" in (unsupported.reason or "")


def test_an_old_binding_without_a_function_is_not_checked() -> None:
    class OldBinding(FakeNvml):
        nvmlDeviceGetRemappedRows = None  # as in bindings older than the function

    facts = gpu_facts.read(OldBinding([idle_gpu()]))
    value = facts.gpus[0].get("remapped_rows")
    assert isinstance(value, Unread) and "has no nvmlDeviceGetRemappedRows" in value.reason
    assert gpu_facts.sysfs_bus_id("00000000:1A:00.0") == "0000:1a:00.0"


def test_only_the_gpus_cuda_visible_devices_leaves_are_judged(make_ctx) -> None:
    gpus = [idle_gpu(0), idle_gpu(1, processes=[(99, None)])]
    assert gpu.processes(make_ctx(gpus, environ={"CUDA_VISIBLE_DEVICES": "0"})).status == "pass"
    assert gpu.processes(make_ctx(gpus)).status == "fail"
