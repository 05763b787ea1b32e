"""PF5xx: the environment a job started from here inherits, and torch's build.

Only variables known to slow the GPU down or to hide it are judged; each item
reports what it read, so the report shows the settings even when they pass.
"""

from __future__ import annotations

from gpudoctor.preflight.context import Context
from gpudoctor.preflight.model import FAIL, PASS, WARN, ItemResult, Unread, not_checked, worst

# the caching allocator's keys (c10/cuda/CUDAAllocatorConfig and the shared AcceleratorAllocatorConfig)
ALLOC_KEYS = {
    "max_split_size_mb", "max_non_split_rounding_mb", "roundup_power2_divisions", "garbage_collection_threshold",
    "expandable_segments", "backend", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
    "pinned_num_register_threads", "pinned_use_background_threads", "pinned_reserve_segment_size_mb",
    "per_process_memory_fraction", "graph_capture_record_stream_reuse",
}
MIN_SPLIT_MB = 20  # torch: "max_split_size_mb too small, must be > 20"

# variable -> (values that count, status, why): NCCL and torch.distributed settings for debugging
DISTRIBUTED = (
    ("NCCL_P2P_DISABLE", ("1",), WARN, "GPU-to-GPU traffic goes through host memory instead of NVLink/PCIe P2P"),
    ("NCCL_SHM_DISABLE", ("1",), WARN, "intra-node traffic falls back to sockets"),
    ("NCCL_IB_DISABLE", ("1",), WARN, "inter-node traffic goes over TCP sockets instead of InfiniBand/RoCE"),
    ("NCCL_P2P_LEVEL", ("LOC", "0"), WARN, "peer-to-peer between GPUs is disabled"),
    ("NCCL_DEBUG", ("INFO", "TRACE"), WARN, "NCCL logs every communicator and collective"),
    ("NCCL_BLOCKING_WAIT", ("1",), WARN, "the host thread blocks on each collective (old name)"),
    ("TORCH_NCCL_BLOCKING_WAIT", ("1",), WARN, "the host thread blocks on each collective"),
    ("TORCH_DISTRIBUTED_DEBUG", ("DETAIL",), WARN, "every collective is checked for consistency across ranks"),
    ("NCCL_ALGO", None, WARN, "overrides NCCL's algorithm choice (meant for debugging)"),
    ("NCCL_PROTO", None, WARN, "overrides NCCL's protocol choice (meant for debugging)"),
)


def probe(ctx: Context) -> list[ItemResult]:
    return [judge(ctx) for _, judge in ITEMS]


def launch_blocking(ctx: Context) -> ItemResult:
    value = ctx.environ.get("CUDA_LAUNCH_BLOCKING")
    expected = "unset or 0"
    if value is None:
        return ItemResult("PF501", PASS, "CUDA_LAUNCH_BLOCKING is not set", expected)
    found = f"CUDA_LAUNCH_BLOCKING={value}"
    status = PASS if value.strip() in ("", "0") else FAIL if value.strip() == "1" else WARN
    return ItemResult("PF501", status, found, expected, values={"CUDA_LAUNCH_BLOCKING": value})


def alloc_conf(ctx: Context) -> ItemResult:
    env = ctx.environ
    problems: list[tuple[str, str]] = []  # (status, text)
    seen = {}
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING"):
        if name in env:
            seen[name] = env[name]
    if env.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "").strip() not in ("", "0"):
        problems.append((FAIL, ("PYTORCH_NO_CUDA_MEMORY_CACHING disables the caching allocator: every tensor is a "
                                "cudaMalloc/cudaFree, which synchronise the GPU")))
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        if env.get(name, "").strip():
            problems.extend(alloc_problems(name, env[name]))
    expected = "valid PYTORCH_CUDA_ALLOC_CONF entries; no PYTORCH_NO_CUDA_MEMORY_CACHING"
    found = "; ".join(f"{k}={v}" for k, v in seen.items()) or "torch's allocator defaults (nothing set)"
    if problems:
        found += ": " + "; ".join(text for _, text in problems)
    status = worst([s for s, _ in problems])
    return ItemResult("PF502", status, found, expected, values={"variables": seen})


def alloc_problems(name: str, value: str) -> list[tuple[str, str]]:
    """What torch would reject (fail) or gpudoctor does not know (warn) in an allocator config."""
    out: list[tuple[str, str]] = []
    for entry in _entries(value):
        if not entry:
            continue
        key, sep, raw = entry.partition(":")
        key, raw = key.strip(), raw.strip()
        if not sep or not raw:
            out.append((FAIL, f"{name}: {entry!r} is not key:value (torch rejects it at the first CUDA allocation)"))
        elif key not in ALLOC_KEYS:
            out.append((WARN, f"{name}: unknown key {key!r} (older torch versions reject unknown keys)"))
        elif key == "max_split_size_mb" and _number(raw) is not None and _number(raw) <= MIN_SPLIT_MB:  # type: ignore[operator]
            out.append((FAIL, f"{name}: max_split_size_mb:{raw} (torch requires more than {MIN_SPLIT_MB})"))
        elif key == "garbage_collection_threshold" and not (0 < (_number(raw) or 0) < 1):
            out.append((FAIL, f"{name}: garbage_collection_threshold:{raw} (torch requires a value in (0, 1))"))
        elif key == "expandable_segments" and raw not in ("True", "False"):
            out.append((FAIL, f"{name}: expandable_segments:{raw} (torch accepts True or False)"))
        elif key == "backend" and raw not in ("native", "cudaMallocAsync"):
            out.append((FAIL, f"{name}: backend:{raw} (torch accepts native or cudaMallocAsync)"))
        elif key == "max_split_size_mb" and _number(raw) is None:
            out.append((FAIL, f"{name}: {key}:{raw} is not a number"))
    return out


def _entries(value: str) -> list[str]:
    """Split on commas outside brackets (roundup_power2_divisions:[256:1,512:2,>:8])."""
    entries, depth, current = [], 0, ""
    for char in value:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth <= 0:
            entries.append(current.strip())
            current = ""
        else:
            current += char
    return [e for e in [*entries, current.strip()] if e]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def visible_devices(ctx: Context) -> ItemResult:
    raw = ctx.environ.get("CUDA_VISIBLE_DEVICES")
    expected = "unset, or GPUs that exist"
    total = len(ctx.nvml.gpus)
    if raw is None:
        found = "CUDA_VISIBLE_DEVICES is not set" + (f": all {total} GPUs visible" if total > 1 else
                                                      ": the GPU is visible" if total else "")
        return ItemResult("PF503", PASS, found, expected)
    found = f"CUDA_VISIBLE_DEVICES={raw!r}"
    values = {"CUDA_VISIBLE_DEVICES": raw}
    if ctx.nvml.error:
        if not raw.strip() or raw.strip() == "-1":
            return ItemResult("PF503", WARN, found + ": hides every GPU", expected, values=values)
        return not_checked("PF503", f"{found}, but the GPUs cannot be listed: {ctx.nvml.error}", expected, **values)
    if not ctx.visible:
        return ItemResult("PF503", FAIL, f"{found}: no GPU visible ({ctx.visibility_problem or 'hides every GPU'})",
                          expected, values=values)
    names = ", ".join(str(g.index) for g in ctx.visible)
    found += f": {len(ctx.visible)} of {total} GPUs (NVML {names})"
    if ctx.visibility_problem:
        return ItemResult("PF503", FAIL, f"{found}; {ctx.visibility_problem}", expected, values=values)
    return ItemResult("PF503", PASS, found, expected, values=values)


def nccl_settings(ctx: Context) -> ItemResult:
    env = ctx.environ
    flagged = []
    for name, bad, status, why in DISTRIBUTED:
        value = env.get(name)
        if value is None or not value.strip():
            continue
        if bad is None or value.strip().upper() in bad:
            flagged.append((status, f"{name}={value}: {why}"))
    present = {k: v for k, v in env.items() if k.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_"))}
    expected = "no NCCL or torch.distributed debugging or fallback setting"
    if flagged:
        found = "; ".join(text for _, text in flagged)
    elif present:
        found = "set, none known to slow collectives: " + ", ".join(f"{k}={v}" for k, v in sorted(present.items()))
    else:
        found = "no NCCL_* or torch.distributed variable set"
    return ItemResult("PF504", worst([s for s, _ in flagged]), found, expected, values={"variables": present})


def torch_cuda_build(ctx: Context) -> ItemResult:
    t = ctx.torch
    expected = "a CUDA build of torch (torch.version.cuda set)"
    if isinstance(t.version, Unread):
        return not_checked("PF505", t.version.reason, expected)
    gpus = len(ctx.nvml.gpus)
    if t.hip:
        return not_checked("PF505", f"torch {t.version} is a ROCm build (HIP {t.hip}): not for NVIDIA GPUs", expected)
    if t.cuda:
        return ItemResult("PF505", PASS, f"torch {t.version} built for CUDA {t.cuda}", expected,
                          values={"torch": t.version, "cuda": t.cuda})
    if not gpus:
        reason = ctx.nvml.error or "no NVIDIA GPU found"
        return not_checked("PF505", f"torch {t.version} is a CPU-only build, and no GPU to use here ({reason})",
                           expected, torch=t.version, cuda=None)
    return ItemResult("PF505", FAIL, f"torch {t.version} is a CPU-only build (torch.version.cuda is None) on a "
                      f"machine with {gpus} NVIDIA GPU{'s' if gpus > 1 else ''}", expected,
                      values={"torch": t.version, "cuda": None})


# (item ID, judge): the order of the checklist
ITEMS = (
    ("PF501", launch_blocking),
    ("PF502", alloc_conf),
    ("PF503", visible_devices),
    ("PF504", nccl_settings),
    ("PF505", torch_cuda_build),
)
