"""PF4xx: the host around the GPUs: usable cores, CPU governor, /dev/shm, locked-memory
and open-files limits, swap, free disk where checkpoints go.

Read from the OS (sysfs, statvfs, rlimits, psutil), never changed. What the OS does
not expose here (not Linux, no cpufreq in a VM) is not-checked with the reason.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import psutil

from gpudoctor.collectors.cpu import cgroup_quota_cores
from gpudoctor.metrics import format_bytes
from gpudoctor.preflight.context import Context
from gpudoctor.preflight.model import FAIL, PASS, WARN, ItemResult, not_checked
from gpudoctor.preflight.policy import UNLIMITED

GIB = 2**30
MIB = 2**20
DEFAULT_CORES_PER_GPU = 4
DOCKER_DEFAULT_SHM = 64 * MIB
RECOMMENDED_SHM = 1 * GIB
DEFAULT_MIN_OPEN_FILES = 4096
DEFAULT_MAX_SWAP_USED = 1 * GIB
DISK_FAIL_BELOW = 1 * GIB
DISK_WARN_BELOW = 10 * GIB
DISK_WARN_SHARE = 0.05


def probe(ctx: Context) -> list[ItemResult]:
    return [judge(ctx) for _, judge in ITEMS]


def _affinity() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable_cores(ctx: Context) -> ItemResult:
    logical = psutil.cpu_count(logical=True)
    affinity = _affinity()
    quota = cgroup_quota_cores(root=ctx.sys_root / "fs" / "cgroup")
    limits = [v for v in (len(affinity) if affinity else None, quota) if v]
    usable = min(limits) if limits else logical
    if not usable:
        return not_checked("PF401", "the number of CPU cores could not be read")
    gpus = len(ctx.visible)
    minimum = ctx.policy.min_cores_per_gpu or DEFAULT_CORES_PER_GPU
    per_gpu = usable / max(1, gpus)
    limits_text = [f"affinity {len(affinity)} of {logical} logical" if affinity else "affinity not readable",
                   f"cgroup quota {quota:g} cores" if quota else "no cgroup CPU quota"]
    for_whom = f"{gpus} {ctx.gpu_label}" if gpus else "1 GPU (none seen: judged as one)"
    found = f"{usable:g} usable cores ({'; '.join(limits_text)}) for {for_whom}: {per_gpu:.1f} per GPU"
    status = PASS if per_gpu >= minimum else (FAIL if ctx.policy.min_cores_per_gpu else WARN)
    return ItemResult("PF401", status, found, f"at least {minimum:g} usable cores per GPU",
                      values={"usable_cores": usable, "logical_cores": logical,
                              "affinity_cores": len(affinity) if affinity else None,
                              "cgroup_quota_cores": quota, "gpus": gpus, "cores_per_gpu": round(per_gpu, 2)})


def cpu_governor(ctx: Context) -> ItemResult:
    cpu_dir = ctx.sys_root / "devices" / "system" / "cpu"
    cpus = sorted(_affinity() or range(psutil.cpu_count() or 1))
    governors: Counter[str] = Counter()
    for cpu in cpus:
        try:
            governors[(cpu_dir / f"cpu{cpu}" / "cpufreq" / "scaling_governor").read_text().strip()] += 1
        except OSError:
            continue
    expected = "performance on every usable core"
    if not governors:
        return not_checked("PF402", "no cpufreq governor in sysfs (virtual machines and some containers do not "
                           "expose CPU frequency scaling)", expected)
    try:
        driver = (cpu_dir / f"cpu{cpus[0]}" / "cpufreq" / "scaling_driver").read_text().strip()
    except OSError:
        driver = None
    found = ", ".join(f"{name} on {n} core{'s' if n > 1 else ''}" for name, n in governors.most_common())
    if driver:
        found += f" (driver {driver})"
    if set(governors) == {"performance"}:
        status = PASS
    else:
        status = FAIL if ctx.policy.require_performance_governor else WARN
        if driver in ("intel_pstate", "amd-pstate-epp") and "powersave" in governors:
            found += "; with this driver powersave still raises the clock under load, less slowly"
    return ItemResult("PF402", status, found, expected, values={"governors": dict(governors), "driver": driver})


def _statvfs(path: Path) -> tuple[int, int] | None:
    """(size, available) in bytes, None when not a mounted filesystem we can read."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def shm_size(ctx: Context) -> ItemResult:
    policy_min = ctx.policy.min_shm_bytes
    expected = (f"at least {format_bytes(policy_min)} (policy)" if policy_min is not None
                else f"more than {format_bytes(DOCKER_DEFAULT_SHM)} (fails), at least {format_bytes(RECOMMENDED_SHM)}")
    sizes = _statvfs(ctx.shm_path) if ctx.shm_path.is_dir() else None
    if sizes is None:
        return not_checked("PF403", f"no {ctx.shm_path} here (not Linux?): DataLoader workers share memory "
                           "another way on this system", expected)
    size, free = sizes
    found = f"{ctx.shm_path}: {format_bytes(size)} ({format_bytes(free)} free)"
    if policy_min is not None:
        status = PASS if size >= policy_min else FAIL
    elif size <= DOCKER_DEFAULT_SHM:
        status = FAIL
        found += ": the container default"
    else:
        status = PASS if size >= RECOMMENDED_SHM else WARN
    return ItemResult("PF403", status, found, expected, values={"size_bytes": size, "free_bytes": free})


def _limit_text(value: int) -> str:
    import resource

    return "unlimited" if value == resource.RLIM_INFINITY else format_bytes(value)


def memlock_limit(ctx: Context) -> ItemResult:
    try:
        import resource
    except ImportError:
        return not_checked("PF404", "no resource limits on this system (not Unix)")
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    unlimited = soft == resource.RLIM_INFINITY
    rdma = sorted(p.name for p in (ctx.sys_root / "class" / "infiniband").glob("*"))
    wanted = ctx.policy.min_memlock_bytes
    found = f"RLIMIT_MEMLOCK {_limit_text(soft)}; " + (f"RDMA devices: {', '.join(rdma)}" if rdma else "no RDMA device")
    values = {"memlock_soft_bytes": None if unlimited else soft, "unlimited": unlimited, "rdma_devices": rdma}
    if wanted is not None:
        ok = unlimited or (wanted != UNLIMITED and soft >= wanted)
        expected = "unlimited (policy)" if wanted == UNLIMITED else f"at least {format_bytes(wanted)} (policy)"
        return ItemResult("PF404", PASS if ok else FAIL, found, expected, values=values)
    expected = "unlimited where RDMA devices exist"
    if unlimited or not rdma:
        if not unlimited:
            found += " (CUDA pinned memory is not charged to it)"
        return ItemResult("PF404", PASS, found, expected, values=values)
    return ItemResult("PF404", WARN, found, expected, values=values)


def open_files_limit(ctx: Context) -> ItemResult:
    try:
        import resource
    except ImportError:
        return not_checked("PF405", "no resource limits on this system (not Unix)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    minimum = ctx.policy.min_open_files or DEFAULT_MIN_OPEN_FILES
    infinite = resource.RLIM_INFINITY
    strategy = ctx.torch.sharing_strategy if isinstance(ctx.torch.sharing_strategy, str) else None
    found = f"soft {'unlimited' if soft == infinite else soft}, hard {'unlimited' if hard == infinite else hard}"
    if strategy:
        found += f"; torch sharing strategy {strategy}"
    ok = soft == infinite or soft >= minimum
    status = PASS if ok else (FAIL if ctx.policy.min_open_files else WARN)
    raise_to = min(65536, hard) if hard != infinite else 65536
    fix = f"ulimit -n {raise_to}" if hard == infinite or hard >= minimum else None
    return ItemResult("PF405", status, found, f"soft limit at least {minimum}", fix_code=fix if not ok else None,
                      values={"soft": None if soft == infinite else soft, "hard": None if hard == infinite else hard,
                              "sharing_strategy": strategy})


def swap_in_use(ctx: Context) -> ItemResult:
    try:
        swap = psutil.swap_memory()
        memory = psutil.virtual_memory()
    except Exception as exc:  # noqa: BLE001  (psutil raises RuntimeError/OSError where /proc is missing)
        return not_checked("PF406", f"swap could not be read: {type(exc).__name__}: {exc}")
    limit = ctx.policy.max_swap_used_bytes
    threshold = DEFAULT_MAX_SWAP_USED if limit is None else limit
    expected = f"at most {format_bytes(threshold)} swapped" + (" (policy)" if limit is not None else "")
    values = {"swap_total_bytes": swap.total, "swap_used_bytes": swap.used, "memory_available_bytes": memory.available}
    if not swap.total:
        return ItemResult("PF406", PASS, "no swap configured", expected, values=values)
    found = (f"{format_bytes(swap.used)} of {format_bytes(swap.total)} swap in use; "
             f"{format_bytes(memory.available)} of {format_bytes(memory.total)} memory available")
    status = PASS if swap.used <= threshold else (FAIL if limit is not None else WARN)
    return ItemResult("PF406", status, found, expected, values=values)


def checkpoint_disk(ctx: Context) -> ItemResult:
    target = ctx.checkpoint_dir
    existing = next((p for p in (target, *target.absolute().parents) if p.exists()), None)
    policy_min = ctx.policy.min_free_disk_bytes
    expected = (f"at least {format_bytes(policy_min)} free (policy)" if policy_min is not None else
                f"at least {format_bytes(DISK_WARN_BELOW)} and {DISK_WARN_SHARE:.0%} free (below "
                f"{format_bytes(DISK_FAIL_BELOW)} fails)")
    sizes = _statvfs(existing) if existing is not None else None
    if sizes is None or existing is None:
        return not_checked("PF407", f"the filesystem of {target} could not be read", expected)
    size, free = sizes
    name = str(target) if existing == target else f"{target} (not created yet; its filesystem)"
    found = f"{name}: {format_bytes(free)} free of {format_bytes(size)}"
    values = {"path": str(target), "free_bytes": free, "size_bytes": size}
    if not os.access(existing, os.W_OK):
        return ItemResult("PF407", FAIL, found + "; not writable by this user", expected + ", writable", values=values)
    if policy_min is not None:
        status = PASS if free >= policy_min else FAIL
    elif free < DISK_FAIL_BELOW:
        status = FAIL
    else:
        status = WARN if free < DISK_WARN_BELOW or (size and free / size < DISK_WARN_SHARE) else PASS
    return ItemResult("PF407", status, found, expected, values=values)


# (item ID, judge): the order of the checklist
ITEMS = (
    ("PF401", usable_cores),
    ("PF402", cpu_governor),
    ("PF403", shm_size),
    ("PF404", memlock_limit),
    ("PF405", open_files_limit),
    ("PF406", swap_in_use),
    ("PF407", checkpoint_disk),
)
