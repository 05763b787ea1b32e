"""Read every GPU fact preflight judges, once, through NVML (pynvml from nvidia-ml-py).

Reading is kept apart from judging (gpu.py, links.py): each call goes through
`_call`, so a call the GPU does not support, a permission error or a binding too
old to have the function costs that one value, which becomes an `Unread` with the
reason. Nothing here raises; an NVML that cannot start leaves `NvmlFacts.error`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.collectors import nvml_device
from gpudoctor.preflight.model import Unread

log = logging.getLogger(__name__)

CLOCK_SM, CLOCK_MEM = 1, 2  # nvmlClockType_t
ERROR_UNCORRECTED = 1  # nvmlMemoryErrorType_t
VOLATILE_ECC, AGGREGATE_ECC = 0, 1  # nvmlEccCounterType_t
MAX_NVLINKS = 18  # NVLink links per GPU up to Hopper and Blackwell (NVML_NVLINK_MAX_LINKS is larger)
NVML_ERROR_INVALID_ARGUMENT = 2


@dataclass
class GpuFacts:
    index: int  # NVML index (PCI order)
    name: str
    uuid: str
    facts: dict[str, Any] = field(default_factory=dict)  # name -> value or Unread

    def get(self, name: str) -> Any:
        return self.facts.get(name, Unread(f"{name} was not read"))


@dataclass
class NvmlFacts:
    error: str | None = None  # NVML unusable (no library, no driver): the reason
    driver: Any = None  # "580.95.05" or Unread
    cuda_driver_version: Any = None  # 12080 (= CUDA 12.8) or Unread
    gpus: list[GpuFacts] = field(default_factory=list)
    count: Any = None  # nvmlDeviceGetCount, or Unread
    open_errors: list[str] = field(default_factory=list)  # GPUs that could not be opened
    topology: dict[tuple[int, int], Any] = field(default_factory=dict)  # (i, j) -> NVML_TOPOLOGY_* level


def _call(nv: Any, name: str, *args: Any) -> Any:
    fn = getattr(nv, name, None)
    if fn is None:
        return Unread(f"this nvidia-ml-py has no {name}")
    try:
        return fn(*args)
    except AttributeError:  # a binding (or a fake) without it
        return Unread(f"this nvidia-ml-py has no {name}")
    except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
        code = nvml_device._code(exc)
        if code in nvml_device.UNSUPPORTED_CODES:
            return Unread(f"{name}: not supported on this GPU or driver")
        if code == nvml_device.NVML_ERROR_NO_PERMISSION:
            return Unread(f"{name}: no permission")
        return Unread(f"{name}: {nvml_device.describe(exc)}")


def read(nv: Any = None) -> NvmlFacts:
    """Everything preflight needs from NVML; `nv` is pynvml unless a fake is given."""
    if nv is None:
        try:
            import pynvml as nv  # type: ignore[no-redef]
        except ImportError:
            return NvmlFacts(error="nvidia-ml-py (pynvml) is not installed")
    try:
        nv.nvmlInit()
    except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
        return NvmlFacts(error=nvml_device.init_failure(nv, exc))
    try:
        return _read_all(nv)
    except Exception as exc:  # a bug of ours: the audit goes on with what the host says
        log.debug("reading NVML failed", exc_info=True)
        return NvmlFacts(error=f"reading NVML failed: {type(exc).__name__}: {exc}")
    finally:
        try:
            nv.nvmlShutdown()
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            log.debug("nvmlShutdown: %s", exc)


def _read_all(nv: Any) -> NvmlFacts:
    out = NvmlFacts()
    driver = _call(nv, "nvmlSystemGetDriverVersion")
    out.driver = driver if isinstance(driver, Unread) else nvml_device.text(driver)
    out.cuda_driver_version = _call(nv, "nvmlSystemGetCudaDriverVersion")
    out.count = _call(nv, "nvmlDeviceGetCount")
    if isinstance(out.count, Unread):
        return out
    handles = []
    for index in range(int(out.count)):
        handle = _call(nv, "nvmlDeviceGetHandleByIndex", index)
        uuid = Unread("no handle") if isinstance(handle, Unread) else _call(nv, "nvmlDeviceGetUUID", handle)
        if isinstance(handle, Unread) or isinstance(uuid, Unread):
            out.open_errors.append(f"GPU {index}: {unread_text(handle, uuid)}")
            continue
        name = _call(nv, "nvmlDeviceGetName", handle)
        gpu = GpuFacts(index, "unknown" if isinstance(name, Unread) else nvml_device.text(name), nvml_device.text(uuid))
        gpu.facts = _device_facts(nv, handle)
        out.gpus.append(gpu)
        handles.append((index, handle))
    for a, (i, hi) in enumerate(handles):
        for j, hj in handles[a + 1:]:
            out.topology[(i, j)] = _call(nv, "nvmlDeviceGetTopologyCommonAncestor", hi, hj)
    return out


def unread_text(*values: Any) -> str:
    return next((v.reason for v in values if isinstance(v, Unread)), "unknown")


def _device_facts(nv: Any, h: Any) -> dict[str, Any]:
    f: dict[str, Any] = {}
    f["persistence"] = _call(nv, "nvmlDeviceGetPersistenceMode", h)
    mig = _call(nv, "nvmlDeviceGetMigMode", h)
    f["mig"] = mig if isinstance(mig, Unread) else int(mig[0])
    f["processes"] = _processes(nv, h)
    # v2 leaves the driver's own reservation out of "used" (what nvidia-smi shows)
    memory = _call(nv, "nvmlDeviceGetMemoryInfo", h, getattr(nv, "nvmlMemory_v2", None))
    if isinstance(memory, Unread):
        memory = _call(nv, "nvmlDeviceGetMemoryInfo", h)
    f["memory_total"] = memory if isinstance(memory, Unread) else int(memory.total)
    f["memory_used"] = memory if isinstance(memory, Unread) else int(memory.used)
    util = _call(nv, "nvmlDeviceGetUtilizationRates", h)
    f["util"] = util if isinstance(util, Unread) else int(util.gpu)
    f["pstate"] = _call(nv, "nvmlDeviceGetPerformanceState", h)
    f["ecc_mode"] = _call(nv, "nvmlDeviceGetEccMode", h)
    f["ecc_volatile_uncorrected"] = _call(nv, "nvmlDeviceGetTotalEccErrors", h, ERROR_UNCORRECTED, VOLATILE_ECC)
    f["ecc_aggregate_uncorrected"] = _call(nv, "nvmlDeviceGetTotalEccErrors", h, ERROR_UNCORRECTED, AGGREGATE_ECC)
    f["remapped_rows"] = _call(nv, "nvmlDeviceGetRemappedRows", h)
    if isinstance(f["remapped_rows"], Unread):  # before Ampere: dynamic page retirement
        f["retired_pending"] = _call(nv, "nvmlDeviceGetRetiredPagesPendingStatus", h)
    reasons = _call(nv, "nvmlDeviceGetCurrentClocksEventReasons", h)
    if isinstance(reasons, Unread) and "has no" in reasons.reason:
        reasons = _call(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", h)  # older bindings
    f["clock_reasons"] = reasons
    f["temperature"] = _call(nv, "nvmlDeviceGetTemperature", h, 0)
    f["power_limit_mw"] = _call(nv, "nvmlDeviceGetEnforcedPowerLimit", h)
    f["power_default_mw"] = _call(nv, "nvmlDeviceGetPowerManagementDefaultLimit", h)
    for key, clock in (("sm", CLOCK_SM), ("mem", CLOCK_MEM)):
        f[f"app_clock_{key}"] = _call(nv, "nvmlDeviceGetApplicationsClock", h, clock)
        f[f"default_app_clock_{key}"] = _call(nv, "nvmlDeviceGetDefaultApplicationsClock", h, clock)
    f["max_clock_sm"] = _call(nv, "nvmlDeviceGetMaxClockInfo", h, CLOCK_SM)
    f["pcie_gen"] = _call(nv, "nvmlDeviceGetCurrPcieLinkGeneration", h)
    f["pcie_gen_max"] = _call(nv, "nvmlDeviceGetMaxPcieLinkGeneration", h)
    f["pcie_gen_gpu_max"] = _call(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", h)
    f["pcie_width"] = _call(nv, "nvmlDeviceGetCurrPcieLinkWidth", h)
    f["pcie_width_max"] = _call(nv, "nvmlDeviceGetMaxPcieLinkWidth", h)
    pci = _call(nv, "nvmlDeviceGetPciInfo", h)
    f["bus_id"] = pci if isinstance(pci, Unread) else sysfs_bus_id(nvml_device.text(pci.busId))
    f["numa_node_nvml"] = _call(nv, "nvmlDeviceGetNumaNodeId", h)
    f["nvlinks"] = _nvlinks(nv, h)
    return f


def _processes(nv: Any, h: Any) -> Any:
    """[(pid, used bytes or None, kind)] of compute and graphics processes, or Unread."""
    found = []
    reasons = []
    for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                     ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        procs = _call(nv, fn, h)
        if isinstance(procs, Unread):
            reasons.append(procs)
            continue
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            found.append((int(p.pid), int(used) if isinstance(used, int) else None, kind))
    if len(reasons) == 2:
        return reasons[0]
    return found


def _nvlinks(nv: Any, h: Any) -> Any:
    """(active, links answering) or Unread when the GPU has no NVLink."""
    states = []
    for link in range(MAX_NVLINKS):
        state = _call(nv, "nvmlDeviceGetNvLinkState", h, link)
        if isinstance(state, Unread):
            if link == 0:
                return Unread("no NVLink on this GPU" if "not supported" in state.reason else state.reason)
            break
        states.append(int(state))
    return (sum(1 for s in states if s == 1), len(states))


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's "00000000:18:00.0" as sysfs names it: "0000:18:00.0" (4-digit domain, lower case)."""
    text = nvml_bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text
