"""Preflight test helpers: NVML faked at the pynvml boundary (tests/collectors/fake_pynvml.py)
and fake sysfs trees in tmp dirs. (A module of its own: `conftest` is ambiguous across test folders.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from gpudoctor.preflight.context import TorchFacts

_spec = importlib.util.spec_from_file_location(
    "fake_pynvml", Path(__file__).parents[1] / "collectors" / "fake_pynvml.py"
)
assert _spec is not None and _spec.loader is not None
fake_pynvml = sys.modules.get("fake_pynvml") or importlib.util.module_from_spec(_spec)
if "fake_pynvml" not in sys.modules:
    sys.modules["fake_pynvml"] = fake_pynvml
    _spec.loader.exec_module(fake_pynvml)
FakeGpu, FakeNvml, GIB = fake_pynvml.FakeGpu, fake_pynvml.FakeNvml, fake_pynvml.GIB


def idle_gpu(index: int = 0, **changes: Any) -> Any:
    """A healthy, idle H200: no process, Idle clock-event reason, links at full speed."""
    fields: dict[str, Any] = {
        "uuid": f"GPU-{index}{index}{index}{index}0000-aaaa-bbbb-cccc-00000000000{index}",
        "memory_used": 512 * 2**20,
        "util_gpu": 0,
        "power_mw": 70_000,
        "reasons": 0x1,
        "bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "numa_node": 0,
    }
    fields.update(changes)
    return FakeGpu(**fields)


CUDA_TORCH = TorchFacts(version="2.11.0+cu130", cuda="13.0", device_count=1, sharing_strategy="file_descriptor")


def sysfs(
    root: Path,
    gpus: dict[str, int] | None = None,
    nodes: dict[int, str] | None = None,
    governors: dict[int, str] | None = None,
    rdma: list[str] | None = None,
) -> Path:
    """A fake /sys: PCI GPUs (bus id -> NUMA node), NUMA nodes (id -> cpulist), governors (cpu -> name)."""
    for bus, node in (gpus or {}).items():
        dev = root / "bus" / "pci" / "devices" / bus
        dev.mkdir(parents=True, exist_ok=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
        (dev / "numa_node").write_text(f"{node}\n")
    for node, cpulist in (nodes or {}).items():
        d = root / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(cpulist + "\n")
    for cpu, name in (governors or {}).items():
        d = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "cpufreq"
        d.mkdir(parents=True, exist_ok=True)
        (d / "scaling_governor").write_text(name + "\n")
        (d / "scaling_driver").write_text("acpi-cpufreq\n")
    for name in rdma or []:
        (root / "class" / "infiniband" / name).mkdir(parents=True, exist_ok=True)
    (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    return root
