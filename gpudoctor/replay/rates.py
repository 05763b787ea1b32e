"""How much faster an edited operation runs: measured rates, with where they come from.

Used only where the trace itself cannot say (it holds no pinned copy to compare a
pageable one with, no TF32 kernel of the same shape). Each rate names its source,
and the replay's scenario detail repeats it, so a prediction says what it assumed.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# Host-to-device copy of a 37 MB batch measured on an H200 host (PCIe Gen5, torch 2.11):
# 13.8 GB/s from pageable memory, 55.3 GB/s from pinned memory.
PAGEABLE_TO_PINNED = 55.3 / 13.8
PAGEABLE_TO_PINNED_SOURCE = "pinned 55.3 vs pageable 13.8 GB/s, measured on an H200 host (PCIe Gen5)"
# The pinned rate is the link's; the pageable one depends on the host's memory and load (6.8 GB/s
# measured for a 256 MiB copy on the same host): a copy made pinned runs at the link's rate,
# never at a fixed multiple of its pageable time.
PINNED_BYTES_PER_US = 55.3e3
PINNED_SOURCE = "measured for a 37 MB pinned host-to-device copy on an H200 host (PCIe Gen5)"

# fp32 GEMM kernel time against the same GEMM with TF32 allowed, by the fp32 kernel's own
# duration (a short kernel is bound by memory or launch, not by the math), measured on an
# H200 with torch 2.11 (benchmarks/rates.py): square matmuls of 512 (28 us in fp32, 1.33x),
# 1024 (73 us, 2.23x), 2048 (358 us, 5.4x), 4096 (2.7 ms, 7.45x) and 8192 (21.7 ms, 7.83x).
TF32_BY_FP32_US: tuple[tuple[float, float], ...] = (
    (0.0, 1.0),
    (28.0, 1.33),
    (73.0, 2.23),
    (358.0, 5.4),
    (2706.0, 7.45),
    (21748.0, 7.83),
)
TF32_SOURCE = "TF32 vs fp32 GEMM time by kernel duration, measured on an H200 (7.45x at 4096^3)"


# A captured CUDA graph of 1000 tiny elementwise kernels replayed in 1.13 ms on an H200
# (torch 2.11): each kernel of a graph takes at least this long, its own run and the gap
# to the next together (launched one by one, the same kernels took 8.7 us each).
GRAPH_KERNEL_US = 1.13
GRAPH_SOURCE = "a graph's kernels at least 1.13 us apart, measured on an H200 (1000 tiny kernels in 1.13 ms)"

# What one call of a model compiled with torch.compile(mode="reduce-overhead") costs the host: its
# guards, the CUDA-graph tree's bookkeeping and the replay's launch, whatever the kernels do. A
# batch-1 MLP of 6, 24 and 96 Linear+ReLU layers (13, 49 and 193 kernels a graph) took 138.8,
# 110.3 and 182.1 us of host per call on an H100 host (torch 2.11; benchmarks/rates.py --only
# cudagraph, benchmarks/results/rates-h100-2026-12-07.json): the least-squares line over the
# three, 117.3 us a call and 0.314 us a kernel. Eager, the same calls took 316-3,262 us.
GRAPH_CALL_US = 117.3
GRAPH_CALL_US_PER_KERNEL = 0.314
GRAPH_CALL_SOURCE = ("117 us + 0.31 us a kernel, torch.compile(mode=\"reduce-overhead\") calls measured on an "
                     "H100 host")


# What a model compiled with torch.compile's default mode (Inductor's kernels, launched one by one, no
# CUDA graphs) costs the host: per call beyond what the same call costs eager, and per kernel it launches.
# Measured on an H100 host with torch 2.11 (benchmarks/rates.py --only compiled_train,compiled;
# benchmarks/results/rates-h100-2026-12-07c.json), least-squares lines over the kernels:
# - a training step's forward, stacks of MLP blocks and of Linear+ReLU layers (13-145 kernels): 549 us
#   + 10.4 us a kernel, against 96 us + 14.4 us eager (so 453 us a call more than eager);
# - its backward, run by autograd's engine (13-240 kernels): 654 us + 17.2 us a kernel, against 656 us
#   + 17.2 us eager: the engine's own cost per backward() is the same either way, a kernel costs alike;
# - a forward without autograd (4-64 softmaxes, one kernel each): 17.8 us + 12.1 us a kernel, against
#   9.8 us a kernel eager.
@dataclass(frozen=True)
class CompiledCost:
    call_us: float  # a compiled call's host cost beyond the same call's eager cost
    kernel_us: float  # each kernel it launches


COMPILED_FORWARD = CompiledCost(call_us=453.0, kernel_us=10.4)  # a training step's forward
COMPILED_BACKWARD = CompiledCost(call_us=0.0, kernel_us=17.2)  # its backward, under autograd's engine
COMPILED_INFERENCE = CompiledCost(call_us=17.8, kernel_us=12.1)  # a forward without a backward
COMPILED_SOURCE = ("torch.compile's default mode measured on an H100 host: a training forward 453 us a call more "
                   "than eager and 10.4 us a kernel, its backward 17.2 us a kernel, a forward without autograd "
                   "17.8 us a call and 12.1 us a kernel")


def graph_call_us(kernels: int) -> float:
    """Host time of one compiled CUDA-graph call replaying `kernels` kernels."""
    return GRAPH_CALL_US + GRAPH_CALL_US_PER_KERNEL * kernels


@dataclass(frozen=True)
class Rate:
    factor: float
    source: str


def tf32_speedup(fp32_us: float) -> float:
    """Speed-up of one fp32 GEMM kernel moved to TF32 tensor cores, interpolated by its duration."""
    xs = [x for x, _ in TF32_BY_FP32_US]
    i = bisect.bisect_right(xs, fp32_us) - 1
    if i >= len(xs) - 1:
        return TF32_BY_FP32_US[-1][1]
    (x0, y0), (x1, y1) = TF32_BY_FP32_US[i], TF32_BY_FP32_US[i + 1]
    return y0 + (y1 - y0) * (fp32_us - x0) / (x1 - x0)
