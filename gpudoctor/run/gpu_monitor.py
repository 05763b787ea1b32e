"""The supervisor's view of the GPUs: wraps the NVML sampler, never fails the run.

Whatever goes wrong on the GPU side (no driver, no NVML, MIG, a GPU that vanishes)
ends up as a reason in Session.unavailable; the workload runs on regardless.
"""

from __future__ import annotations

import logging
from typing import Any

from gpudoctor.session import Session

log = logging.getLogger(__name__)


class GpuMonitor:
    def __init__(self, t0: float, interval_s: float = 0.5) -> None:
        self.t0 = t0
        self.interval_s = interval_s
        self.sampler: Any = None
        self.error: str | None = None

    def start(self) -> None:
        try:
            from gpudoctor.collectors.nvml import NvmlSampler

            self.sampler = NvmlSampler(interval_s=self.interval_s, t0=self.t0)
            self.sampler.start()
        except Exception as exc:
            self.sampler = None
            self.error = f"GPU sampling unavailable: {type(exc).__name__}: {exc}"
            log.debug("nvml sampler failed to start", exc_info=True)

    def select(self, uuids: list[str]) -> None:
        if self.sampler is not None:
            try:
                self.sampler.select(sorted(set(uuids)))
            except Exception:
                log.debug("select failed", exc_info=True)

    def latest_util(self) -> float | None:
        if self.sampler is None:
            return None
        try:
            util: float | None = self.sampler.latest_util()
            return util
        except Exception:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            return None

    def stop(self) -> Any:
        if self.sampler is None:
            return self.error or "GPU sampling unavailable"
        try:
            return self.sampler.stop()
        except Exception as exc:  # noqa: BLE001  (an NVML or driver failure costs only this value)
            return f"GPU sampling failed: {type(exc).__name__}: {exc}"

    @staticmethod
    def apply(result: Any, session: Session) -> None:
        if isinstance(result, str) or result is None:
            session.unavailable.setdefault("gpu", result or "GPU sampling unavailable")
            session.unavailable.setdefault("gpm", session.unavailable["gpu"])
            return
        session.environment.gpus = list(result.gpus)
        session.environment.driver = result.driver
        session.gpu_samples = list(result.samples)
        session.gpu_sample_interval_s = getattr(result, "interval_s", None)
        for fact, reason in result.unavailable.items():
            session.unavailable.setdefault(fact, reason)
        session.notes.extend(getattr(result, "notes", []) or [])
        if session.torch_cuda_used is False and "gpu" not in session.unavailable:
            session.notes.append("GPUs were present but the workload put no work on them")
