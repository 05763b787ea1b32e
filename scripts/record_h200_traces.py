"""Record real GPU traces of known workloads and summarise them (run on the GPU machine)."""
import dataclasses
import gzip
import json
import os
import shutil
import sys
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, os.getcwd())
from gpudoctor.collectors.trace import summarize_trace

OUT = os.environ.get("OUT") or tempfile.mkdtemp(prefix="gpudoctor-traces-")
dev = "cuda"


def record(name, step_fn, steps=8, warmup=3, sched=False):
    for _ in range(warmup):
        step_fn()
    torch.cuda.synchronize()
    path = os.path.join(tempfile.gettempdir(), f"{name}.json")
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    if sched:
        def ready(p):
            p.export_chrome_trace(path)
        with profile(activities=acts, with_stack=True, schedule=schedule(wait=1, warmup=1, active=steps),
                     on_trace_ready=ready) as prof:
            for _ in range(steps + 2):
                step_fn()
                prof.step()
    else:
        prof = profile(activities=acts, with_stack=True)
        prof.start()
        for _ in range(steps):
            step_fn()
        torch.cuda.synchronize()
        prof.stop()
        prof.export_chrome_trace(path)
    t0 = time.perf_counter()
    summary = summarize_trace(path, steps=0 if sched else steps)
    took = time.perf_counter() - t0
    size = os.path.getsize(path)
    with open(path, "rb") as src, gzip.open(f"{OUT}/{name}.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    d = dataclasses.asdict(summary)
    d["_parse_s"] = round(took, 3)
    d["_trace_bytes"] = size
    return d


# 1. launch-bound: many tiny elementwise kernels
x_small = torch.randn(256, device=dev)


def tiny_step():
    y = x_small
    for _ in range(300):
        y = (y * 1.0001 + 0.001).relu()
    return y


# 2. host syncs: .item(), .cpu(), torch.cuda.synchronize(), print(tensor)
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
xb = torch.randn(256, 512, device=dev)
yb = torch.randint(0, 10, (256,), device=dev)


def sync_step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    loss.backward()
    opt.step()
    running = loss.item()  # sync 1
    acc = (model(xb).argmax(1) == yb).float().mean().cpu()  # sync 2
    torch.cuda.synchronize()  # sync 3
    if running < 0:
        print(acc)
    return running


# 3. copies: pageable H2D of a big batch + many small copies + one pinned async copy
host_big = torch.randn(64, 3, 224, 224)
host_pinned = torch.randn(64, 3, 224, 224).pin_memory()
host_small = [torch.randn(100) for _ in range(50)]


def copy_step():
    a = host_big.to(dev)
    b = host_pinned.to(dev, non_blocking=True)
    smalls = [t.to(dev) for t in host_small]
    out = (a + b).mean() + sum(s.sum() for s in smalls)
    return out.to("cpu")


# 4. fp32 matmul vs TF32 vs bf16
A = torch.randn(4096, 4096, device=dev)
B = torch.randn(4096, 4096, device=dev)


def mm_step():
    c = A
    for _ in range(4):
        c = c @ B
    return c


def bf16_step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return mm_step()


results = {}
results["launch_bound"] = record("launch_bound", tiny_step, steps=5)
results["host_sync"] = record("host_sync", sync_step, steps=8, sched=True)
results["copies"] = record("copies", copy_step, steps=5)
torch.backends.cuda.matmul.allow_tf32 = False
results["fp32_matmul"] = record("fp32_matmul", mm_step, steps=3)
torch.backends.cuda.matmul.allow_tf32 = True
results["tf32_matmul"] = record("tf32_matmul", mm_step, steps=3)
torch.backends.cuda.matmul.allow_tf32 = False
results["bf16_matmul"] = record("bf16_matmul", bf16_step, steps=3)
results["_env"] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
with open(f"{OUT}/summaries.json", "w") as fh:
    json.dump(results, fh, indent=1)
for k, v in results.items():
    if k.startswith("_"):
        continue
    print(k, {f: v[f] for f in ("kernel_count", "kernel_median_us", "gpu_busy_us", "gpu_idle_us",
                                  "idle_gap_kernel_to_kernel_us", "idle_gap_host_wait_us", "idle_gap_other_us",
                                  "launch_count", "short_kernel_count", "sync_count", "matmul_fp32_us",
                                  "matmul_tensor_core_us", "matmul_total_us", "tf32_enabled", "steps",
                                  "_parse_s", "_trace_bytes")})
