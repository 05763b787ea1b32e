"""Which GPUs a set of processes has open, and how much each uses, from NVML's process lists.

For `gpudoctor attach`: without an agent inside the process, NVML is the only one who
knows which GPUs it uses. Its compute and graphics process lists name every process
with a context on each GPU (by PID, with its used memory); the GPUs are told apart by
UUID, as everywhere in gpudoctor. Where the driver keeps per-process utilization
samples (`nvmlDeviceGetProcessUtilization`), the processes' own SM share is read too.

PIDs are the host's: a process inside a container (another PID namespace) is not found
by the PID the container shows. Nothing here raises: what could not be read is a reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.collectors import nvml_device

log = logging.getLogger(__name__)


@dataclass
class ProcessGpuUse:
    """What NVML said about the processes, accumulated over the polls of one attach."""

    devices: dict[int, set[str]] = field(default_factory=dict)  # pid -> UUIDs of the GPUs it has open
    peak_memory: dict[str, int] = field(default_factory=dict)  # UUID -> peak memory the processes used
    # (UUID, sample time in us) -> the processes' SM share then, %, summed over the processes
    sm_util: dict[tuple[str, int], float] = field(default_factory=dict)
    last_seen_us: dict[str, int] = field(default_factory=dict)  # UUID -> newest utilization sample read
    error: str | None = None  # why the process lists could not be read (the last reason)

    def uuids(self) -> list[str]:
        return sorted({u for found in self.devices.values() for u in found})


class ProcessGpuWatcher:
    """Poll NVML's process lists for `pids` (call `poll` now and then; it never raises)."""

    def __init__(self, nvml: Any = None) -> None:
        self.nv = nvml
        self.use = ProcessGpuUse()
        self._handles: list[tuple[Any, str]] | None = None
        self._initialized = False

    def _open(self) -> list[tuple[Any, str]]:
        if self._handles is not None:
            return self._handles
        self._handles = []
        if self.nv is None:
            import pynvml

            self.nv = pynvml
        self.nv.nvmlInit()  # reference-counted: the sampler's own init is not disturbed
        self._initialized = True
        for index in range(int(self.nv.nvmlDeviceGetCount())):
            handle = self.nv.nvmlDeviceGetHandleByIndex(index)
            self._handles.append((handle, nvml_device.text(self.nv.nvmlDeviceGetUUID(handle))))
        return self._handles

    def poll(self, pids: Iterable[int]) -> None:
        wanted = set(pids)
        try:
            handles = self._open()
        except Exception as exc:  # noqa: BLE001 (an NVML or driver failure costs only this value)
            self.use.error = f"NVML cannot list the GPUs: {nvml_device.describe(exc)}"
            return
        for handle, uuid in handles:
            used = 0
            for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    processes = getattr(self.nv, name)(handle)
                except Exception as exc:  # noqa: BLE001 (an NVML or driver failure costs only this value)
                    self.use.error = f"NVML cannot list the processes on GPU {uuid}: {nvml_device.describe(exc)}"
                    continue
                for process in processes or ():
                    pid = int(getattr(process, "pid", -1))
                    if pid not in wanted:
                        continue
                    self.use.devices.setdefault(pid, set()).add(uuid)
                    memory = getattr(process, "usedGpuMemory", None)
                    if isinstance(memory, int) and memory >= 0:
                        used += memory
            if used:
                self.use.peak_memory[uuid] = max(used, self.use.peak_memory.get(uuid, 0))
            if any(uuid in found for found in self.use.devices.values()):
                self._utilization(handle, uuid, wanted)

    def _utilization(self, handle: Any, uuid: str, pids: set[int]) -> None:
        read = getattr(self.nv, "nvmlDeviceGetProcessUtilization", None)
        if read is None:
            return
        since = self.use.last_seen_us.get(uuid, 0)
        try:
            samples = read(handle, since)
        except Exception as exc:  # noqa: BLE001  (NOT_SUPPORTED on many GPUs, NOT_FOUND when nothing new)
            log.debug("process utilization on %s: %s", uuid, exc)
            return
        for sample in samples or ():
            stamp = int(getattr(sample, "timeStamp", 0) or 0)
            self.use.last_seen_us[uuid] = max(stamp, self.use.last_seen_us.get(uuid, 0))
            if int(getattr(sample, "pid", -1)) in pids and stamp > since:
                key = (uuid, stamp)
                self.use.sm_util[key] = self.use.sm_util.get(key, 0.0) + float(getattr(sample, "smUtil", 0) or 0)

    def close(self) -> None:
        if self._initialized:
            self._initialized = False
            try:
                self.nv.nvmlShutdown()
            except Exception:  # noqa: BLE001 (an NVML or driver failure costs only this value)
                pass
