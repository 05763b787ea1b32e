"""A fake pynvml (nvidia-ml-py) module for the NVML sampler's and preflight's tests.

The functions the sampler calls are emulated with the real signatures; constants,
NVMLError (with its per-code subclasses) and the ctypes structure
c_nvmlGpmMetricsGet_t come from the real pynvml, so the sampler fills a real GPM
request. A real NVML function the fake does not emulate raises AttributeError
instead of silently reaching the real library.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

GIB = 2**30


def default_gpm_values() -> dict[int, float]:
    return {
        pynvml.NVML_GPM_METRIC_SM_UTIL: 96.0,
        pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 14.0,
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 93.0,
        pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 40.0,
        pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 100.0,  # MiB/s
        pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 50.0,
    }


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H200"
    memory_total: int = 141 * GIB
    memory_used: int = 10 * GIB
    util_gpu: int = 100
    util_memory: int = 40
    power_mw: int = 692_000
    power_limit_mw: int = 700_000
    sm_clock: int = 1980
    sm_clock_max: int = 1980
    reasons: int = 0x4  # SwPowerCap
    temperature: int = 55
    pcie_rx_kb: int = 3000  # KB/s, as nvmlDeviceGetPcieThroughput reports
    pcie_tx_kb: int = 1000
    gpm: bool = True
    mig: bool = False
    mig_uuids: list[str] = field(default_factory=list)
    gpm_values: dict[int, float] = field(default_factory=default_gpm_values)
    gpm_errors: dict[int, int] = field(default_factory=dict)  # metric id -> its nvmlReturn
    fail: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code raised
    lost: bool = False
    # ---- what preflight reads (defaults: a healthy H200 SXM; None -> NOT_SUPPORTED) ----
    persistence: int = 1
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # compute (pid, used bytes)
    graphics_processes: list[tuple[int, int | None]] = field(default_factory=list)
    pstate: int = 0
    ecc_mode: tuple[int, int] | None = (1, 1)  # (current, pending)
    ecc_volatile_uncorrected: int = 0
    ecc_aggregate_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corrected, uncorrected, pending, failure
    retired_pending: int | None = 0
    power_default_mw: int = 700_000
    app_clocks: dict[int, int] | None = field(default_factory=lambda: {1: 1980, 2: 3201})  # clock type -> MHz
    default_app_clocks: dict[int, int] | None = field(default_factory=lambda: {1: 1980, 2: 3201})
    pcie_gen: int = 5
    pcie_gen_max: int = 5  # card and system
    pcie_gen_gpu_max: int = 5  # card alone
    pcie_width: int = 16
    pcie_width_max: int = 16
    bus_id: str = "00000000:18:00.0"
    numa_node: int | None = 0
    nvlinks: list[int] | None = None  # per-link state (1 active); None: no NVLink


@dataclass(frozen=True)
class Handle:
    gpu: FakeGpu
    mig_uuid: str | None = None


class FakeNvml:
    """Module-like object: `FakeNvml(gpus=[...])` is passed as NvmlSampler(nvml=...)."""

    def __init__(self, gpus: list[FakeGpu], clock: Callable[[], float] | None = None,
                 driver: str = "580.159.04", init_error: int | None = None, cuda_driver_version: int = 13000,
                 topology: dict[tuple[int, int], int] | None = None) -> None:
        self.gpus = gpus
        self.cuda_driver_version = cuda_driver_version
        self.topology = topology or {}  # (i, j) -> NVML_TOPOLOGY_* level; default SINGLE (one switch)
        self.clock = clock or (lambda: 0.0)
        self.driver = driver
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.initialized = 0
        self.shutdowns = 0
        self.snapshots: dict[int, tuple[FakeGpu, float, int]] = {}  # sample address -> (gpu, t, seq)
        self.allocated: set[int] = set()
        self.freed: set[int] = set()
        self.gpm_spacings: list[float] = []
        self._seq = 0
        self._buffers: list[Any] = []  # keeps the allocated GPM sample buffers alive

    def __getattr__(self, name: str) -> Any:
        value = getattr(pynvml, name)
        if callable(value) and name.startswith("nvml"):
            raise AttributeError(f"the fake pynvml does not emulate {name}")
        return value  # constants, NVMLError*, ctypes structures

    # ---- helpers --------------------------------------------------------------
    def _enter(self, name: str, handle: Handle | None = None) -> FakeGpu | None:
        self.calls[name] += 1
        if not self.initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if handle is None:
            return None
        gpu = handle.gpu
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if name in gpu.fail:
            raise pynvml.NVMLError(gpu.fail[name])
        return gpu

    # ---- library ----------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdowns += 1
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return Handle(self.gpus[index])

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        self._enter("nvmlDeviceGetHandleByUUID")
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return Handle(gpu)
            if uuid in gpu.mig_uuids:
                return Handle(gpu, mig_uuid=uuid)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceIsMigDeviceHandle(self, handle: Handle) -> ctypes.c_uint:
        self._enter("nvmlDeviceIsMigDeviceHandle")
        return ctypes.c_uint(1 if handle.mig_uuid else 0)  # the real binding returns a c_uint

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: Handle) -> Handle:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        return Handle(handle.gpu)

    # ---- static facts -------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        gpu = self._enter("nvmlDeviceGetUUID", handle)
        return handle.mig_uuid or gpu.uuid

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        return self._enter("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Handle, version: Any = None) -> Any:
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        return SimpleNamespace(total=gpu.memory_total, used=gpu.memory_used,
                               free=gpu.memory_total - gpu.memory_used)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetMaxClockInfo(self, handle: Handle, type: int) -> int:
        assert type == pynvml.NVML_CLOCK_SM
        return self._enter("nvmlDeviceGetMaxClockInfo", handle).sm_clock_max

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        gpu = self._enter("nvmlDeviceGetMigMode", handle)
        if not gpu.mig and not gpu.mig_uuids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # GPUs without MIG say so
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig else 0
        return [mode, mode]

    # ---- per-interval reads ---------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> Any:
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        if gpu.mig:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # as real NVML in MIG mode
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetClockInfo(self, handle: Handle, type: int) -> int:
        assert type == pynvml.NVML_CLOCK_SM
        return self._enter("nvmlDeviceGetClockInfo", handle).sm_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle).reasons

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._enter("nvmlDeviceGetTemperature", handle).temperature

    def nvmlDeviceGetPcieThroughput(self, device: Handle, counter: int) -> int:
        gpu = self._enter("nvmlDeviceGetPcieThroughput", device)
        return gpu.pcie_rx_kb if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES else gpu.pcie_tx_kb

    # ---- GPM ----------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, device: Handle) -> Any:
        gpu = self._enter("nvmlGpmQueryDeviceSupport", device)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 1 if gpu.gpm else 0
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        sample = ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())
        self.allocated.add(_address(sample))
        self._buffers.append(sample)
        return sample

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        self.freed.add(_address(gpmSample))

    def nvmlGpmSampleGet(self, device: Handle, gpmSample: Any) -> Any:
        gpu = self._enter("nvmlGpmSampleGet", device)
        self._seq += 1
        self.snapshots[_address(gpmSample)] = (gpu, self.clock(), self._seq)
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        assert metricsGet.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        first = self.snapshots[_address(metricsGet.sample1)]
        second = self.snapshots[_address(metricsGet.sample2)]
        assert first[0] is second[0] and first[2] < second[2], "samples of one GPU, in order"
        gpu = first[0]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if "nvmlGpmMetricsGet" in gpu.fail:
            raise pynvml.NVMLError(gpu.fail["nvmlGpmMetricsGet"])
        self.gpm_spacings.append(second[1] - first[1])
        for slot in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[slot]
            code = gpu.gpm_errors.get(metric.metricId, pynvml.NVML_SUCCESS)
            metric.nvmlReturn = code
            metric.value = gpu.gpm_values.get(metric.metricId, 0.0) if code == pynvml.NVML_SUCCESS else 0.0
        return metricsGet


    # ---- what preflight reads ----------------------------------------------------------
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlDeviceGetPersistenceMode(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetPersistenceMode", handle).persistence

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[Any]:
        gpu = self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Handle) -> list[Any]:
        gpu = self._enter("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.graphics_processes]

    def nvmlDeviceGetPerformanceState(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetPerformanceState", handle).pstate

    def nvmlDeviceGetEccMode(self, handle: Handle) -> list[int]:
        gpu = self._enter("nvmlDeviceGetEccMode", handle)
        return list(_supported(gpu.ecc_mode))

    def nvmlDeviceGetTotalEccErrors(self, handle: Handle, errorType: int, counterType: int) -> int:
        gpu = self._enter("nvmlDeviceGetTotalEccErrors", handle)
        _supported(gpu.ecc_mode)
        assert errorType == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        return (
            gpu.ecc_volatile_uncorrected if counterType == pynvml.NVML_VOLATILE_ECC else gpu.ecc_aggregate_uncorrected
        )

    def nvmlDeviceGetRemappedRows(self, handle: Handle) -> tuple[int, int, int, int]:
        return _supported(self._enter("nvmlDeviceGetRemappedRows", handle).remapped_rows)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Handle) -> int:
        return _supported(self._enter("nvmlDeviceGetRetiredPagesPendingStatus", handle).retired_pending)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetPowerManagementDefaultLimit", handle).power_default_mw

    def nvmlDeviceGetApplicationsClock(self, handle: Handle, clockType: int) -> int:
        return _supported(self._enter("nvmlDeviceGetApplicationsClock", handle).app_clocks)[clockType]

    def nvmlDeviceGetDefaultApplicationsClock(self, handle: Handle, clockType: int) -> int:
        return _supported(self._enter("nvmlDeviceGetDefaultApplicationsClock", handle).default_app_clocks)[clockType]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle).pcie_gen_gpu_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Handle) -> int:
        return self._enter("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> Any:
        return SimpleNamespace(
            busId=self._enter("nvmlDeviceGetPciInfo", handle).bus_id.encode()
        )  # bytes, as the binding

    def nvmlDeviceGetNumaNodeId(self, handle: Handle) -> int:
        return _supported(self._enter("nvmlDeviceGetNumaNodeId", handle).numa_node)

    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:
        links = _supported(self._enter("nvmlDeviceGetNvLinkState", handle).nvlinks)
        if link >= len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Handle, device2: Handle) -> int:
        self._enter("nvmlDeviceGetTopologyCommonAncestor", device1)
        i, j = sorted((self.gpus.index(device1.gpu), self.gpus.index(device2.gpu)))
        return self.topology.get((i, j), pynvml.NVML_TOPOLOGY_SINGLE)


def _supported(value: Any) -> Any:
    if value is None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    return value


def _address(sample: Any) -> int:
    return ctypes.cast(sample, ctypes.c_void_p).value or 0


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds
