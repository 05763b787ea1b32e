"""PF1xx (driver and GPUs), judged from the NVML facts; `per_gpu` is shared with health and links.

Per-GPU items judge the GPUs a job started here would use (CUDA_VISIBLE_DEVICES;
all when unset) and report one status: the worst of the GPUs, naming the GPUs
that did not pass.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.metrics import format_bytes
from gpudoctor.preflight.context import Context
from gpudoctor.preflight.gpu_facts import GpuFacts
from gpudoctor.preflight.model import (
    FAIL,
    NOT_CHECKED,
    PASS,
    WARN,
    ItemResult,
    Unread,
    not_checked,
    worst,
)

GIB = 2**30
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers (not NVSwitch bridges, not audio)
FOREIGN_MEMORY = 1 * GIB  # used memory with no process listed: another PID namespace holds it

# (status, text, values) for one GPU
Verdict = tuple[str, str, dict[str, Any]]


def per_gpu(ctx: Context, item_id: str, expected: str, judge: Callable[[GpuFacts], Verdict]) -> ItemResult:
    """Judge each visible GPU; one result naming the GPUs that did not pass."""
    if ctx.nvml.error:
        return not_checked(item_id, ctx.nvml.error, expected)
    if not ctx.visible:
        why = "no NVIDIA GPU found" if not ctx.nvml.gpus else "CUDA_VISIBLE_DEVICES leaves no GPU (PF503)"
        return not_checked(item_id, why, expected)
    verdicts = [(g, *judge(g)) for g in ctx.visible]
    status = worst([v[1] for v in verdicts])
    values = {str(g.index): vals for g, _, _, vals in verdicts}
    texts = {text for _, _, text, _ in verdicts}
    if len(texts) == 1 and len({s for _, s, _, _ in verdicts}) == 1:
        scope = f"GPU {verdicts[0][0].index}" if len(verdicts) == 1 else f"all {len(verdicts)} GPUs"
        found = f"{scope}: {texts.pop()}"
    else:
        shown = [v for v in verdicts if v[1] != PASS] or verdicts
        found = "; ".join(f"GPU {g.index}: {text}" for g, _, text, _ in shown)
        passed = len(verdicts) - len(shown)
        if passed and shown is not verdicts:
            found += f" (the other {passed} pass)"
    reason = None
    if status == NOT_CHECKED:
        reason = "; ".join(f"GPU {g.index}: {text}" for g, s, text, _ in verdicts if s == NOT_CHECKED)
    return ItemResult(item_id, status, found, expected, reason=reason, values={"gpus": values})


def probe(ctx: Context) -> list[ItemResult]:
    return [judge(ctx) for _, judge in ITEMS]


def _cuda_text(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


def _major_minor(text: str) -> tuple[int, int] | None:
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def driver_cuda(ctx: Context) -> ItemResult:
    expected = "driver CUDA version >= torch.version.cuda"
    nv, t = ctx.nvml, ctx.torch
    if nv.error:
        return not_checked("PF101", nv.error, expected)
    if isinstance(nv.cuda_driver_version, Unread):
        return not_checked("PF101", nv.cuda_driver_version.reason, expected)
    if isinstance(t.version, Unread):
        return not_checked("PF101", t.version.reason, expected)
    driver = _cuda_text(int(nv.cuda_driver_version))
    if not t.cuda:
        return not_checked("PF101", f"torch {t.version} has no CUDA build (PF505); the driver supports CUDA {driver}",
                           expected)
    values = {"driver": nv.driver if isinstance(nv.driver, str) else None, "driver_cuda": driver, "torch_cuda": t.cuda}
    found = f"driver {values['driver'] or '?'} supports CUDA {driver}; torch {t.version} built for CUDA {t.cuda}"
    have, need = _major_minor(driver), _major_minor(str(t.cuda))
    if have is None or need is None:
        return not_checked("PF101", f"cannot compare CUDA versions {driver!r} and {t.cuda!r}", expected)
    if have >= need:
        return ItemResult("PF101", PASS, found, expected, values=values)
    if have[0] < need[0]:
        return ItemResult("PF101", FAIL, found + ": the driver is too old for this torch (CUDA cannot start)",
                          expected, values=values)
    return ItemResult("PF101", WARN, found + ": runs under minor-version compatibility (no newer PTX JIT)",
                      expected, values=values)


def pci_gpu_count(sys_root: Path) -> int | None:
    """NVIDIA GPUs on the PCI bus per sysfs; None when sysfs has no PCI tree (not Linux)."""
    devices = sys_root / "bus" / "pci" / "devices"
    if not devices.is_dir():
        return None
    count = 0
    for dev in devices.iterdir():
        try:
            vendor = (dev / "vendor").read_text().strip().lower()
            klass = (dev / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and klass.startswith(GPU_CLASSES):
            count += 1
    return count


def gpus_visible(ctx: Context) -> ItemResult:
    expected = "NVML sees every GPU on the PCI bus, torch every one CUDA_VISIBLE_DEVICES leaves"
    pci = pci_gpu_count(ctx.sys_root)
    nv, t = ctx.nvml, ctx.torch
    values: dict[str, Any] = {"pci": pci, "nvml": None if nv.error else len(nv.gpus), "visible": len(ctx.visible)}
    if nv.error:
        if pci:
            return ItemResult("PF102", FAIL, f"{pci} NVIDIA GPUs on the PCI bus, but NVML cannot start: {nv.error}",
                              expected, values=values)
        return not_checked("PF102", f"no NVIDIA GPU found ({nv.error})", expected, **values)
    parts = [f"PCI bus {pci}" if pci is not None else "PCI bus not readable", f"NVML {len(nv.gpus)}"]
    problems: list[tuple[str, str]] = []
    if nv.open_errors:
        problems.append((FAIL, "NVML cannot open " + "; ".join(nv.open_errors)))
    if pci is not None and pci > len(nv.gpus) + len(nv.open_errors):
        problems.append((WARN, (f"{pci - len(nv.gpus)} GPU(s) on the bus are not in NVML (lost by the driver, "
                                "or a container given only some GPUs)")))
    if "CUDA_VISIBLE_DEVICES" in ctx.environ:
        parts.append(f"CUDA_VISIBLE_DEVICES leaves {len(ctx.visible)}")
    if isinstance(t.device_count, int):
        parts.append(f"torch {t.device_count}")
        values["torch"] = t.device_count
        if t.device_count < len(ctx.visible):
            problems.append((FAIL, f"torch sees {t.device_count} of the {len(ctx.visible)} GPUs it should"))
    else:
        reason = t.device_count.reason if isinstance(t.device_count, Unread) else (
            t.version.reason if isinstance(t.version, Unread) else "not read")
        parts.append(f"torch: {reason}")
    if not nv.gpus and not pci:
        return not_checked("PF102", "no NVIDIA GPU found (PCI bus and NVML)", expected, **values)
    found = ", ".join(parts) + ("; " + "; ".join(text for _, text in problems) if problems else "")
    status = worst([s for s, _ in problems])
    if status == PASS and not isinstance(t.device_count, int):
        return ItemResult("PF102", NOT_CHECKED, found, expected, reason="torch's view was not read", values=values)
    return ItemResult("PF102", status, found, expected, values=values)


def persistence(ctx: Context) -> ItemResult:
    fail_or_warn = FAIL if ctx.policy.require_persistence_mode else WARN

    def judge(g: GpuFacts) -> Verdict:
        mode = g.get("persistence")
        if isinstance(mode, Unread):
            return NOT_CHECKED, mode.reason, {}
        return (
            (PASS, "enabled", {"persistence": True})
            if int(mode) == 1
            else (fail_or_warn, "disabled", {"persistence": False})
        )

    return per_gpu(ctx, "PF103", "enabled" + (" (policy)" if ctx.policy.require_persistence_mode else ""), judge)


def mig(ctx: Context) -> ItemResult:
    def judge(g: GpuFacts) -> Verdict:
        mode = g.get("mig")
        if isinstance(mode, Unread):
            if "not supported" in mode.reason:
                return PASS, "off (not MIG-capable)", {"mig": False}
            return NOT_CHECKED, mode.reason, {}
        return (WARN, "MIG enabled", {"mig": True}) if int(mode) == 1 else (PASS, "off", {"mig": False})

    return per_gpu(ctx, "PF104", "MIG off", judge)


def processes(ctx: Context) -> ItemResult:
    def judge(g: GpuFacts) -> Verdict:
        procs, used, util = g.get("processes"), g.get("memory_used"), g.get("util")
        if isinstance(procs, Unread):
            return NOT_CHECKED, procs.reason, {}
        others = [p for p in procs if p[0] != ctx.pid]
        values = {
            "processes": [{"pid": pid, "used_bytes": b, "kind": kind} for pid, b, kind in others],
            "memory_used_bytes": used if isinstance(used, int) else None,
            "utilization_percent": util if isinstance(util, int) else None,
        }
        if others:
            listed = ", ".join(
                f"pid {pid} ({format_bytes(b) if b is not None else 'memory unknown'})" for pid, b, _ in others[:5]
            )
            return FAIL, f"{len(others)} other process{'es' if len(others) > 1 else ''}: {listed}", values
        signs = []
        if isinstance(used, int) and used > FOREIGN_MEMORY:
            signs.append(f"{format_bytes(used)} of memory used")
        if isinstance(util, int) and util > 0:
            signs.append(f"utilization {util}%")
        if signs:
            return WARN, "no process listed but " + " and ".join(signs) + " (processes of another container?)", values
        memory = f"{format_bytes(used)} used" if isinstance(used, int) else "memory use not read"
        return PASS, f"no process; {memory}", values

    return per_gpu(ctx, "PF105", "no other process; idle", judge)


# (item ID, judge): the order of the checklist
ITEMS = (
    ("PF101", driver_cuda),
    ("PF102", gpus_visible),
    ("PF103", persistence),
    ("PF104", mig),
    ("PF105", processes),
)
