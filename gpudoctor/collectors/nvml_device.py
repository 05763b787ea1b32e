"""One GPU as the NVML sampler sees it: static facts, one sample per interval, GPM pairs.

Every NVML call goes through `Device._read`, so one failing call costs only its own
field (None), an unsupported one is not asked again, and a lost GPU stops its own
sampling (DeviceLost) without touching the others.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Any

from gpudoctor.session import GpuInfo, GpuSample

log = logging.getLogger(__name__)

# NVML return codes (nvml.h): a stable ABI, so the sampler does not depend on which
# constants a given nvidia-ml-py version exports.
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_GPU_NOT_FOUND = 28
LOST_CODES = {NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED, NVML_ERROR_GPU_NOT_FOUND}
UNSUPPORTED_CODES = {NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND}

# nvmlClocksEventReason* bits (the names nvidia-smi prints, shortened)
CLOCK_EVENT_REASONS = (
    (0x1, "Idle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
)

# pynvml constant -> GpuSample field. ANY_TENSOR covers HMMA (fp16/bf16) and the rest.
GPM_METRICS = (
    ("NVML_GPM_METRIC_SM_UTIL", "sm_activity"),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", "sm_occupancy"),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor_activity"),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", "dram_bw_util"),
    ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", "pcie_rx_mb_s"),
    ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", "pcie_tx_mb_s"),
)
GPM_MIN_SPACING_S = 0.1  # NVML: the two snapshots must be at least 100 ms apart
GPM_FAILURES_BEFORE_GIVING_UP = 3
MIB_S_TO_MB_S = 1.048576  # GPM reports PCIe in MiB/s; GpuSample holds MB/s
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1


class DeviceLost(Exception):
    """The GPU stopped answering (fell off the bus, needs a reset)."""


class Device:
    def __init__(self, nv: Any, handle: Any, info: GpuInfo, clock: Callable[[], float]) -> None:
        self.nv = nv
        self.handle = handle
        self.info = info
        self.clock = clock
        self.samples: list[GpuSample] = []
        self.stride = 1  # raw samples merged into one kept sample (long runs)
        self._pending: list[GpuSample] = []
        self.lost: str | None = None
        self.failed_polls = 0
        self.last_error: str | None = None
        self.unsupported: set[str] = set()
        self.errors: dict[str, str] = {}  # field -> first error, reported once in notes
        self.reasons_read = False
        self.reasons_error: str | None = None
        self.gpm_reason: str | None = None  # why this GPU has no GPM values
        self._gpm_ids: list[tuple[int, str]] = []
        self._gpm_pair: list[Any] = []  # [previous snapshot, buffer for the next]
        self._gpm_t = 0.0
        self._gpm_failures = 0
        self._pcie_from_gpm = False

    # ---- opening ------------------------------------------------------------
    @classmethod
    def open(cls, nv: Any, index: int, clock: Callable[[], float]) -> Device:
        """Read the static facts of GPU `index`; raises only when it has no handle or UUID."""
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        info = GpuInfo(index=index, uuid=text(nv.nvmlDeviceGetUUID(handle)), name="unknown")
        info.name = _optional(lambda: text(nv.nvmlDeviceGetName(handle))) or "unknown"
        info.memory_total_bytes = _optional(lambda: int(nv.nvmlDeviceGetMemoryInfo(handle).total))
        limit_mw = _optional(lambda: float(nv.nvmlDeviceGetEnforcedPowerLimit(handle)))
        info.power_limit_w = limit_mw / 1000.0 if limit_mw else None
        info.sm_clock_max_mhz = _optional(lambda: int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)))
        info.mig = _mig_mode(nv, handle)
        dev = cls(nv, handle, info, clock)
        dev._open_gpm()
        return dev

    def _open_gpm(self) -> None:
        nv, info = self.nv, self.info
        try:
            info.gpm_supported = bool(nv.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice)
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            unsupported = _code(exc) in UNSUPPORTED_CODES or isinstance(exc, AttributeError)
            info.gpm_supported = False if unsupported else None
            self.gpm_reason = f"GPM query failed on {info.name}: {describe(exc)}"
            return
        if not info.gpm_supported:
            self.gpm_reason = f"GPM unsupported on {info.name} (needs Hopper or newer and driver 520+)"
            return
        if info.mig:
            # GPM would have to be read per GPU instance (nvmlGpmMigSampleGet); a whole-GPU
            # number would mix tenants, so it is left out rather than misleading.
            self.gpm_reason = "MIG mode is on: GPM per GPU instance is not sampled"
            return
        self._gpm_ids = [(int(getattr(nv, const)), name) for const, name in GPM_METRICS if hasattr(nv, const)]
        try:
            self._gpm_pair = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
            nv.nvmlGpmSampleGet(self.handle, self._gpm_pair[0])
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            self.gpm_reason = f"GPM sampling failed to start: {describe(exc)}"
            self._release_gpm()
            return
        self._gpm_t = self.clock()
        self._pcie_from_gpm = any(name.startswith("pcie") for _, name in self._gpm_ids)

    # ---- one sample -----------------------------------------------------------
    def sample(self, now: float, t: float) -> GpuSample | None:
        """One reading of every field; None when not a single value could be read."""
        h = self.handle
        s = GpuSample(t=t, gpu_index=self.info.index)
        util = self._read("utilization", "nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            s.util_percent, s.mem_util_percent = float(util.gpu), float(util.memory)
        mem = self._read("memory", "nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            s.memory_used_bytes = int(mem.used)
        power_mw = self._read("power", "nvmlDeviceGetPowerUsage", h)
        s.power_w = float(power_mw) / 1000.0 if power_mw is not None else None
        clock = self._read("sm_clock", "nvmlDeviceGetClockInfo", h, self.nv.NVML_CLOCK_SM)
        s.sm_clock_mhz = int(clock) if clock is not None else None
        reasons = self._read("clock_events", self._reasons_function(), h)
        if reasons is not None:
            s.clock_event_reasons = decode_reasons(int(reasons))
            self.reasons_read = True
        temp = self._read("temperature", "nvmlDeviceGetTemperature", h, self.nv.NVML_TEMPERATURE_GPU)
        s.temperature_c = float(temp) if temp is not None else None
        for name, value in self._gpm(now).items():
            setattr(s, name, value)
        if not self._pcie_from_gpm:
            # ~20 ms each inside the driver: only where GPM cannot give PCIe for free
            rx = self._read("pcie", "nvmlDeviceGetPcieThroughput", h, NVML_PCIE_UTIL_RX_BYTES)
            tx = self._read("pcie", "nvmlDeviceGetPcieThroughput", h, NVML_PCIE_UTIL_TX_BYTES)
            s.pcie_rx_mb_s = rx / 1000.0 if rx is not None else None  # NVML gives KB/s
            s.pcie_tx_mb_s = tx / 1000.0 if tx is not None else None
        measured = any(getattr(s, f.name) is not None for f in dataclasses.fields(s)
                       if f.name not in ("t", "gpu_index", "clock_event_reasons")) or reasons is not None
        if not measured:
            self.failed_polls += 1
            return None
        self.failed_polls = 0
        return s

    def _reasons_function(self) -> str:
        # renamed from "throttle" to "clocks event" in NVML 12.535; older bindings lack the new name
        if hasattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons"):
            return "nvmlDeviceGetCurrentClocksEventReasons"
        return "nvmlDeviceGetCurrentClocksThrottleReasons"

    def _read(self, field: str, function: str, *args: Any) -> Any:
        if field in self.unsupported:
            return None
        try:
            return getattr(self.nv, function)(*args)
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            code = _code(exc)
            if code in LOST_CODES:
                raise DeviceLost(describe(exc)) from None
            if code in UNSUPPORTED_CODES or isinstance(exc, AttributeError):
                self.unsupported.add(field)  # do not pay for it again
            why = describe(exc)
            self.errors.setdefault(field, why)
            self.last_error = f"{field}: {why}"
            if field == "clock_events":
                self.reasons_error = self.reasons_error or why
            return None

    def _gpm(self, now: float) -> dict[str, float]:
        if not self._gpm_pair or now - self._gpm_t < GPM_MIN_SPACING_S:
            return {}
        nv = self.nv
        previous, current = self._gpm_pair
        try:
            nv.nvmlGpmSampleGet(self.handle, current)
            request = nv.c_nvmlGpmMetricsGet_t()
            request.version = nv.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(self._gpm_ids)
            request.sample1 = previous
            request.sample2 = current
            for slot, (metric_id, _) in enumerate(self._gpm_ids):
                request.metrics[slot].metricId = metric_id
            nv.nvmlGpmMetricsGet(request)
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            if _code(exc) in LOST_CODES:
                raise DeviceLost(describe(exc)) from None
            self._gpm_failures += 1
            self.errors.setdefault("gpm", describe(exc))
            if self._gpm_failures >= GPM_FAILURES_BEFORE_GIVING_UP:
                self.gpm_reason = f"GPM failing on {self.info.name}: {describe(exc)}"
                self._release_gpm()
            return {}
        self._gpm_failures = 0
        self._gpm_pair = [current, previous]  # the new snapshot starts the next interval
        self._gpm_t = now
        values: dict[str, float] = {}
        for slot, (_, name) in enumerate(self._gpm_ids):
            metric = request.metrics[slot]
            value = float(metric.value)
            if metric.nvmlReturn == NVML_SUCCESS and math.isfinite(value):
                values[name] = value * MIB_S_TO_MB_S if name.startswith("pcie") else value
                continue
            self.errors.setdefault(f"GPM {name}", f"NVML error {int(metric.nvmlReturn)}")
            if name.startswith("pcie") and metric.nvmlReturn in UNSUPPORTED_CODES:
                self._pcie_from_gpm = False  # fall back to the PCIe counters
        if not self._pcie_from_gpm:
            values.pop("pcie_rx_mb_s", None)
            values.pop("pcie_tx_mb_s", None)
        return values

    # ---- keeping, bounded -----------------------------------------------------
    def keep(self, sample: GpuSample, max_samples: int) -> None:
        """Append, merging raw samples `stride` at a time once the bound was reached."""
        self._pending.append(sample)
        if len(self._pending) >= self.stride:
            self.samples.append(merge(self._pending))
            self._pending = []
        if len(self.samples) > max_samples:
            self.samples = [merge(self.samples[i : i + 2]) for i in range(0, len(self.samples), 2)]
            self.stride *= 2

    def flush(self, max_samples: int | None = None) -> None:
        if self._pending:
            tail = merge(self._pending)
            if max_samples is not None and len(self.samples) >= max_samples:  # at the bound: fold in
                tail = merge([self.samples.pop(), tail])
            self.samples.append(tail)
            self._pending = []

    def close(self) -> None:
        self._release_gpm()

    def _release_gpm(self) -> None:
        for handle in self._gpm_pair:
            try:
                self.nv.nvmlGpmSampleFree(handle)
            except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
                log.debug("nvmlGpmSampleFree: %s", exc)
        self._gpm_pair = []

    def notes(self) -> list[str]:
        if not self.errors:
            return []
        detail = "; ".join(f"{name}: {why}" for name, why in sorted(self.errors.items()))
        return [f"GPU {self.info.index}: some NVML values were not read ({detail})"]


# ---- helpers ----------------------------------------------------------------------
def decode_reasons(mask: int) -> list[str]:
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    return names + ([f"0x{rest:x}"] if rest else [])


def merge(samples: list[GpuSample]) -> GpuSample:
    """One sample standing for several: means of what was measured, the majority's reasons."""
    if len(samples) == 1:
        return samples[0]
    out = GpuSample(t=round(sum(s.t for s in samples) / len(samples), 3), gpu_index=samples[0].gpu_index)
    for f in dataclasses.fields(GpuSample):
        if f.name in ("t", "gpu_index", "clock_event_reasons"):
            continue
        values = [getattr(s, f.name) for s in samples if getattr(s, f.name) is not None]
        if values:
            mean = sum(values) / len(values)
            setattr(out, f.name, round(mean) if isinstance(values[0], int) else mean)
    counts: dict[str, int] = {}
    for s in samples:
        for reason in s.clock_event_reasons:
            counts[reason] = counts.get(reason, 0) + 1
    # a reason present in half the merged samples or more keeps roughly its share of time
    out.clock_event_reasons = [r for r, n in counts.items() if 2 * n >= len(samples)]
    return out


def text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def describe(exc: BaseException) -> str:
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001  (NVMLError.__str__ calls into the library, which may be gone)
        message = ""
    code = _code(exc)
    return message or (f"NVML error {code}" if code is not None else type(exc).__name__)


def init_failure(nv: Any, exc: BaseException) -> str:
    code = _code(exc)
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this machine"
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded (no GPU, or the kernel module is not running)"
    if code == NVML_ERROR_NO_PERMISSION:
        return "no permission to query the GPUs through NVML"
    return f"NVML failed to initialise: {describe(exc)}"


def mig_parent_uuid(nv: Any, uuid: str) -> str | None:
    """The physical GPU behind a MIG device UUID (CUDA may report it as GPU-<uuid>)."""
    candidates = [uuid]
    if uuid.upper().startswith("GPU-"):
        candidates.append("MIG-" + uuid[4:])
    for candidate in candidates:
        try:
            handle = nv.nvmlDeviceGetHandleByUUID(candidate)
            is_mig = nv.nvmlDeviceIsMigDeviceHandle(handle)
            if getattr(is_mig, "value", is_mig):
                handle = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            return text(nv.nvmlDeviceGetUUID(handle))
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            log.debug("no NVML device for %s: %s", candidate, exc)
    return None


def _mig_mode(nv: Any, handle: Any) -> bool | None:
    try:
        current = nv.nvmlDeviceGetMigMode(handle)[0]
    except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
        # GPUs without MIG answer NOT_SUPPORTED: that is a clear "no"
        return False if _code(exc) in UNSUPPORTED_CODES else None
    return int(current) == 1  # NVML_DEVICE_MIG_ENABLE


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _optional(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
        log.debug("nvml static read failed: %s", exc)
        return None
