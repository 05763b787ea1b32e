"""A dmon-like NVML sampler the supervisor runs in one background thread.

Per GPU and interval it reads a handful of values: utilization (a duty cycle),
memory, power against the enforced limit, SM clock, clock-event (throttle)
reasons, temperature, and on GPM-capable GPUs (Hopper and newer) the real SM
activity, SM occupancy, tensor activity, DRAM bandwidth and PCIe traffic. GPM
values are averages between two GPM snapshots taken at least 100 ms apart.

Nothing here raises into the supervisor: a missing library or driver, MIG mode,
one failing call or a GPU that vanishes mid-run turns into a `None` value and a
reason in `NvmlResult.unavailable` / `notes`, and the run goes on.

NVML enumerates GPUs in PCI order whatever CUDA_VISIBLE_DEVICES says, so the GPUs
the workload uses are matched by UUID (`select`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.collectors import nvml_device
from gpudoctor.collectors.nvml_device import Device, DeviceLost
from gpudoctor.session import GpuInfo, GpuSample

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.1  # GPM needs snapshots at least 100 ms apart
FAILED_POLLS_BEFORE_GIVING_UP = 5


@dataclass
class NvmlResult:
    gpus: list[GpuInfo] = field(default_factory=list)  # the GPUs sampled (the workload's, once known)
    samples: list[GpuSample] = field(default_factory=list)  # sorted by t, then GPU
    driver: str | None = None
    interval_s: float | None = None  # effective spacing (grows when long runs are thinned)
    unavailable: dict[str, str] = field(default_factory=dict)  # fact -> reason: gpu, gpm, clock_events
    notes: list[str] = field(default_factory=list)


class NvmlSampler:
    """Sample the workload's GPUs every `interval_s` seconds in a daemon thread.

    `nvml` is the pynvml module (nvidia-ml-py) unless a fake is injected; `t0` and
    `clock` define sample times (`GpuSample.t = clock() - t0`, time.time by default);
    `environ` is the workload's environment (for CUDA_VISIBLE_DEVICES). Intervals
    below 0.1 s are raised to 0.1 s (GPM's minimum). Beyond `max_samples_per_gpu`,
    samples are merged pairwise and the effective interval doubles, so long runs
    stay bounded in memory.
    """

    def __init__(
        self,
        interval_s: float = 0.5,
        nvml: Any = None,
        t0: float | None = None,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
        max_samples_per_gpu: int = 7200,
    ) -> None:
        self.interval_s = max(MIN_INTERVAL_S, float(interval_s))
        self._nv = nvml
        self._t0 = t0
        self._clock = clock
        self._environ = os.environ if environ is None else environ
        self._max_samples = max(2, max_samples_per_gpu)
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._initialized = False  # nvmlInit succeeded: nvmlShutdown owed
        self._result: NvmlResult | None = None
        self._devices: list[Device] = []
        self._active: list[Device] = []  # sampled now
        self._used: set[str] = set()  # UUIDs the workload reported (union over select calls)
        self._pending: list[str] | None = None  # select() waiting for the sampling thread
        self._pending_set = False
        self._selection_note: str | None = None
        self._driver: str | None = None
        self._unavailable: dict[str, str] = {}
        self._notes: list[str] = []
        self._latest_util: float | None = None
        self._poll_errors = 0

    # ---- public API ---------------------------------------------------------
    def start(self, t0: float | None = None, background: bool = True) -> None:
        """Initialise NVML, enumerate the GPUs and start sampling. Never raises."""
        if self._started:
            return
        self._started = True
        if t0 is not None:
            self._t0 = t0
        if self._t0 is None:
            self._t0 = self._clock()
        try:
            self._setup()
        except Exception as exc:  # a bug of ours must not cost the workload its run
            log.debug("nvml setup failed", exc_info=True)
            self._unavailable.setdefault("gpu", f"NVML sampling failed to start: {type(exc).__name__}: {exc}")
        if background and self._initialized and self._devices:
            self._thread = threading.Thread(target=self._run, name="gpudoctor-nvml", daemon=True)
            self._thread.start()

    def select(self, uuids: list[str] | None) -> None:
        """Sample exactly these GPUs (UUIDs, as CUDA reports them); None: back to the default."""
        with self._lock:
            self._pending = None if uuids is None else [str(u) for u in uuids]
            self._pending_set = True

    def latest_util(self) -> float | None:
        """Mean duty cycle of the sampled GPUs at the last poll (for a live status line)."""
        return self._latest_util

    def poll(self) -> None:
        """Take one sample of every selected GPU now (the thread calls this each interval)."""
        if not self._initialized:
            return
        self._apply_selection()
        now = self._clock()
        utils = []
        for dev in list(self._active):
            if dev.lost:
                continue
            try:
                sample = dev.sample(now, round(now - (self._t0 or 0.0), 3))
            except DeviceLost as lost:
                self._lose(dev, now, str(lost))
                continue
            if sample is None:
                if dev.failed_polls >= FAILED_POLLS_BEFORE_GIVING_UP:
                    self._lose(dev, now, f"no value in {dev.failed_polls} polls in a row ({dev.last_error})")
                continue
            dev.keep(sample, self._max_samples)
            if sample.util_percent is not None:
                utils.append(sample.util_percent)
        self._latest_util = sum(utils) / len(utils) if utils else None

    def stop(self) -> NvmlResult:
        """Stop sampling, release NVML and return what was measured. Never raises; idempotent."""
        if self._result is not None:
            return self._result
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5.0)
            if self._thread.is_alive():
                self._notes.append("the NVML sampling thread did not stop in time; its last samples are missing")
        try:
            self._result = self._finish()
        except Exception as exc:
            log.debug("nvml finish failed", exc_info=True)
            self._result = NvmlResult(unavailable={"gpu": f"NVML sampling failed: {type(exc).__name__}: {exc}",
                                                   "gpm": "NVML sampling failed"})
        return self._result

    # ---- setup --------------------------------------------------------------
    def _setup(self) -> None:
        reason = self._init_library()
        if reason:
            self._unavailable["gpu"] = reason
            return
        nv = self._nv
        try:
            self._driver = nvml_device.text(nv.nvmlSystemGetDriverVersion())
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            log.debug("driver version: %s", exc)
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            self._unavailable["gpu"] = f"NVML cannot count the GPUs: {nvml_device.describe(exc)}"
            return
        for index in range(count):
            try:
                self._devices.append(Device.open(nv, index, self._clock))
            except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
                self._notes.append(f"GPU {index}: cannot be opened through NVML ({nvml_device.describe(exc)})")
        if not self._devices:
            self._unavailable["gpu"] = "no NVIDIA GPU found" if count == 0 else "no GPU could be opened through NVML"
            return
        self._active = self._visible_devices()

    def _init_library(self) -> str | None:
        if self._nv is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError:
                return "nvidia-ml-py (pynvml) is not installed"
            self._nv = pynvml
        try:
            self._nv.nvmlInit()
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            return nvml_device.init_failure(self._nv, exc)
        self._initialized = True
        return None

    def _visible_devices(self) -> list[Device]:
        """The GPUs CUDA_VISIBLE_DEVICES names (indices or UUID prefixes), in its order; all when unset.

        Indices are CUDA's order, which matches NVML's PCI order on machines of identical
        GPUs (CUDA's FASTEST_FIRST ties break by PCI bus); select() corrects any guess
        once the workload reports the UUIDs it really uses.
        """
        raw = self._environ.get("CUDA_VISIBLE_DEVICES")
        if raw is None:
            return list(self._devices)
        chosen: list[Device] = []
        for token in (t.strip() for t in raw.split(",")):
            # CUDA ignores everything from the first entry it cannot resolve
            dev = self._device_by_index(token) if token.isdigit() else self._resolve(token, prefix=True)
            if dev is None:
                break
            if dev not in chosen:
                chosen.append(dev)
        if not chosen:
            self._selection_note = f"CUDA_VISIBLE_DEVICES={raw!r} hides every GPU"
        return chosen

    def _device_by_index(self, token: str) -> Device | None:
        return next((d for d in self._devices if d.info.index == int(token)), None)

    def _resolve(self, uuid: str, prefix: bool = False) -> Device | None:
        """A physical GPU by UUID: its own, a unique prefix, or the UUID of one of its MIG slices."""
        key = uuid.strip().lower()
        if not key:
            return None
        for dev in self._devices:
            if dev.info.uuid.lower() == key:
                return dev
        if prefix:
            matches = [d for d in self._devices if d.info.uuid.lower().startswith(key)]
            if len(matches) == 1:
                return matches[0]
        parent = nvml_device.mig_parent_uuid(self._nv, uuid)
        if parent:
            return next((d for d in self._devices if d.info.uuid.lower() == parent.lower()), None)
        return None

    # ---- sampling -----------------------------------------------------------
    def _run(self) -> None:
        next_at = time.monotonic()
        while True:
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (a slow call, a suspended VM): skip, never burst
                next_at = time.monotonic()
                delay = 0.0
            if self._stop_event.wait(delay):
                return
            try:
                self.poll()
                self._poll_errors = 0
            except Exception as exc:
                log.debug("nvml poll failed", exc_info=True)
                self._poll_errors += 1
                if self._poll_errors >= FAILED_POLLS_BEFORE_GIVING_UP:
                    self._notes.append(f"GPU sampling stopped early: {type(exc).__name__}: {exc}")
                    return

    def _apply_selection(self) -> None:
        with self._lock:
            if not self._pending_set:
                return
            uuids, self._pending, self._pending_set = self._pending, None, False
        if uuids is None:
            self._active = self._visible_devices()
            return
        found = {u: self._resolve(u) for u in uuids}
        resolved = [d for d in found.values() if d is not None]
        unknown = [u for u, d in found.items() if d is None]
        if unknown:
            self._notes.append("GPUs the workload reported but NVML does not know: " + ", ".join(unknown))
        if uuids and not resolved:
            return  # keep sampling what we had rather than nothing
        self._active = list(dict.fromkeys(resolved))
        self._used.update(d.info.uuid for d in resolved)
        if not uuids:
            self._selection_note = "the workload reported no GPU in use"

    def _lose(self, dev: Device, now: float, why: str) -> None:
        dev.lost = why
        t = now - (self._t0 or 0.0)
        self._notes.append(f"GPU {dev.info.index} ({dev.info.uuid}) stopped answering at t={t:.1f} s: {why}; "
                           "its sampling stopped there")
        log.info("GPU %d lost: %s", dev.info.index, why)

    # ---- result -------------------------------------------------------------
    def _finish(self) -> NvmlResult:
        nv = self._nv
        for dev in self._devices:
            dev.flush(self._max_samples)
            dev.close()
        if self._initialized:
            try:
                nv.nvmlShutdown()
            except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
                log.debug("nvmlShutdown: %s", exc)
        devices = self._devices
        if self._used:  # the workload said which GPUs it used: only those matter
            devices = [d for d in devices if d.info.uuid in self._used]
        else:
            devices = [d for d in devices if d.samples or d in self._active]
        samples = sorted((s for d in devices for s in d.samples), key=lambda s: (s.t, s.gpu_index))
        unavailable = dict(self._unavailable)
        if not self._started:
            unavailable["gpu"] = "GPU sampling was not started"
        if "gpu" not in unavailable and not samples:
            lost = [d.lost for d in devices if d.lost]
            unavailable["gpu"] = (self._selection_note or (f"GPU lost: {lost[0]}" if lost else None)
                                  or "no GPU sample was taken (the run ended before the first interval)")
        if "gpu" in unavailable:
            unavailable.setdefault("gpm", unavailable["gpu"])
            unavailable.setdefault("clock_events", unavailable["gpu"])
        else:
            self._gpm_facts(devices, samples, unavailable)
        notes = list(self._notes)
        notes.extend(n for d in devices for n in d.notes())
        notes = list(dict.fromkeys(notes))  # select() may repeat the same remark
        stride = max((d.stride for d in devices), default=1)
        return NvmlResult(gpus=[d.info for d in devices], samples=samples, driver=self._driver,
                          interval_s=self.interval_s * stride, unavailable=unavailable, notes=notes)

    def _gpm_facts(self, devices: list[Device], samples: list[GpuSample], unavailable: dict[str, str]) -> None:
        with_gpm = {s.gpu_index for s in samples if s.sm_activity is not None}
        without = [d for d in devices if d.info.index not in with_gpm]
        if not with_gpm:
            reasons = sorted({d.gpm_reason or "no GPM value was read" for d in without})
            unavailable["gpm"] = "; ".join(reasons)
        elif without:
            self._notes.append("GPM metrics missing on GPU " + ", ".join(
                f"{d.info.index} ({d.gpm_reason or 'no value read'})" for d in without))
        if not any(d.reasons_read for d in devices):
            reasons = sorted({d.reasons_error or "not read" for d in devices})
            unavailable["clock_events"] = "clock-event reasons unavailable: " + "; ".join(reasons)
