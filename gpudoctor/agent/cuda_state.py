"""What the agent reports about CUDA: the devices in use, the OOM observer, allocator snapshots.

Functions of the TorchHooks object (torch_hooks.py); they run on the agent's thread
(periodic) or where an event happens (an OOM, a profiler window's end).
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .protocol import AllocatorSnapshot, CudaDevice
    from .torch_hooks import TorchHooks


def report_cuda(hooks: TorchHooks) -> None:
    if not hooks.cuda_initialized():
        return
    pending = getattr(hooks, "_pending_oom_observer", None)
    if pending is not None:
        hooks._pending_oom_observer = None
        try:
            pending[0](pending[1])
        except Exception as exc:  # noqa: BLE001 (the observer's failure is an agent_error)
            hooks.agent.error("oom_observer", exc)
    cuda = hooks.torch.cuda
    used: list[CudaDevice] = []
    for index in range(cuda.device_count()):
        try:
            if cuda.memory_reserved(index) > 0:
                props = cuda.get_device_properties(index)
                used.append({"index": index, "uuid": _uuid(props), "name": props.name,
                             "total_memory": props.total_memory})
        except Exception:  # noqa: BLE001 (a device that cannot answer is left out)
            continue
    key = tuple(d["uuid"] for d in used)
    if used and key != hooks.cuda_reported:
        hooks.cuda_reported = key
        hooks.agent.emit("cuda", devices=used)
    now = time.time()
    if used and now - hooks.last_alloc_t >= 2.0:
        hooks.last_alloc_t = now
        snap = hooks.allocator_snapshot("periodic")
        if snap:
            hooks.agent.emit("alloc", **snap)


def allocator_snapshot(hooks: TorchHooks, label: str) -> AllocatorSnapshot | None:
    """A compact copy of torch.cuda.memory_stats() for the current device."""
    if not hooks.cuda_initialized():
        return None
    cuda = hooks.torch.cuda
    try:
        device = cuda.current_device()
        stats = cuda.memory_stats(device)
    except Exception:  # noqa: BLE001 (no allocator stats: no snapshot)
        return None

    def g(key: str) -> int:
        return int(stats.get(key, 0) or 0)

    snap: AllocatorSnapshot = {
        "label": label,
        "device": device,
        "allocated_bytes": g("allocated_bytes.all.current"),
        "reserved_bytes": g("reserved_bytes.all.current"),
        "active_bytes": g("active_bytes.all.current"),
        "inactive_split_bytes": g("inactive_split_bytes.all.current"),
        "max_allocated_bytes": g("allocated_bytes.all.peak"),
        "max_reserved_bytes": g("reserved_bytes.all.peak"),
        "num_alloc_retries": g("num_alloc_retries"),
        "num_ooms": g("num_ooms"),
    }
    try:
        free, total = cuda.mem_get_info(device)
        snap["device_free_bytes"] = int(free)
        snap["device_total_bytes"] = int(total)
    except Exception:  # noqa: BLE001 (free/total memory is optional in the snapshot)
        pass
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", "")
    snap["expandable_segments"] = "expandable_segments:true" in conf.replace(" ", "").lower()
    return snap


def _uuid(props: object) -> str | None:
    raw = getattr(props, "uuid", None)
    if raw is None:
        return None
    text = str(raw)
    return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text
