"""Read the GPUs' PCIe links while the job runs.

Links downshift at idle, so an idle machine cannot say whether a link trains up to
its full generation and width under load. While `preflight -- COMMAND` runs the
job, this thread reads each GPU's link and utilization every half second through
NVML and keeps the best link seen while the GPU was busy; PF301/PF302 use it.
Never raises: without NVML it simply sees nothing.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class LinkUnderLoad:
    busy_samples: int = 0  # samples with utilization above 0
    max_generation: int = 0  # the best seen while busy
    max_width: int = 0
    max_utilization: int = 0


class LinkWatcher:
    def __init__(self, indices: list[int], nv: Any = None, interval_s: float = 0.5) -> None:
        self.indices = list(indices)
        self.interval_s = interval_s
        self._nv = nv
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpudoctor-preflight-links", daemon=True)
        self.seen: dict[int, LinkUnderLoad] = {}

    def start(self) -> LinkWatcher:
        if self.indices:
            self._thread.start()
        return self

    def stop(self) -> dict[int, LinkUnderLoad]:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)
        return {i: s for i, s in self.seen.items() if s.busy_samples}

    def _run(self) -> None:
        nv = self._nv
        try:
            if nv is None:
                import pynvml as nv  # type: ignore[no-redef]
            nv.nvmlInit()
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            log.debug("link watcher: no NVML: %s", exc)
            return
        try:
            handles = {i: nv.nvmlDeviceGetHandleByIndex(i) for i in self.indices}
            while not self._stop.is_set():
                for index, handle in handles.items():
                    self._sample(nv, index, handle)
                self._stop.wait(self.interval_s)
        except Exception as exc:  # noqa: BLE001  (a GPU lost mid-run: keep what was seen)
            log.debug("link watcher stopped: %s", exc)
        finally:
            try:
                nv.nvmlShutdown()
            except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
                log.debug("link watcher: nvmlShutdown: %s", exc)

    def _sample(self, nv: Any, index: int, handle: Any) -> None:
        try:
            util = int(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
            generation = int(nv.nvmlDeviceGetCurrPcieLinkGeneration(handle))
            width = int(nv.nvmlDeviceGetCurrPcieLinkWidth(handle))
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            log.debug("link watcher GPU %d: %s", index, exc)
            return
        if util <= 0:
            return
        seen = self.seen.setdefault(index, LinkUnderLoad())
        seen.busy_samples += 1
        seen.max_generation = max(seen.max_generation, generation)
        seen.max_width = max(seen.max_width, width)
        seen.max_utilization = max(seen.max_utilization, util)
