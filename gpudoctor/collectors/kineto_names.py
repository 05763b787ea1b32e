"""Naming rules for kineto traces: which CUDA calls launch or synchronise, what a
memcpy's name says about pinned vs pageable memory, which GEMM kernels use tensor
cores, and which Python frames are the user's.
"""

from __future__ import annotations

import functools
import re
import sys

KERNEL_LAUNCH_APIS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel"})
GRAPH_LAUNCH_APIS = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
SYNC_APIS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
    "cudaMemcpy3D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol", "cuStreamSynchronize", "cuCtxSynchronize",
    "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD", "cudaFree", "cudaFreeHost",  # frees wait for the device
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy"})
STEP_PREFIX = "ProfilerStep#"  # torch.profiler's record_function range around each prof.step()
# torch.profiler's range around each DataLoader batch (single or multiprocessing iterator)
DATA_ANNOTATION = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
OPTIMIZER_ANNOTATION = "Optimizer.step#"  # torch.optim wraps step() in record_function("Optimizer.step#Adam.step")
# the update function torch.optim's step() dispatches to, a Python frame in a with_stack trace
# ("torch/optim/adam.py(347): _single_tensor_adam"): the for-loop, foreach or fused implementation of the
# same update; the rest of step() (its wrapper and hooks, _init_group's loop over the parameters) runs alike
OPTIMIZER_UPDATE_FRAME = re.compile(r"(?:^|/)torch/optim/\w+\.py\(\d+\): _(?:single_tensor|multi_tensor|fused)_\w+$")
_VERSION_SUFFIX = re.compile(r"_v\d+$")
_COPY_NAME = re.compile(r"Memcpy (\w+) \(([^()]*?) -> ([^()]*?)\)")
_FRAME_NAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
_BUILTIN = re.compile(r"^<built-in (?:method (?P<method>\w+) of (?P<owner>[\w.]+) object|function (?P<func>\w+))")
_SKIPPED_PACKAGES = frozenset({"torch", "torchvision", "torchaudio", "functorch", "triton", "numpy", "gpudoctor",
                               "_gpudoctor_agent", "sitecustomize"})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
# GEMM kernels by name. Tensor cores: 16/8-bit and TF32 types, MMA instruction families
# (h884, s1688, s16816, hmma, wgmma), CUTLASS "tensorop", cuBLASLt's nvjet.
_GEMM = re.compile(r"gemm|gemv|nvjet|wgmma")
_NOT_GEMM = re.compile(r"conv|fprop|dgrad|wgrad|splitkreduce")
_TENSOR_CORE = re.compile(r"tf32|bf16|bfloat16|f16|half|fp8|e4m3|e5m2|int8|i8816|imma|hmma|wgmma|tensorop"
                          r"|tensor\d+x\d+|nvjet|[hsi]\d{3,5}gemm")
_FP32 = re.compile(r"sgemm|simt|ffma|f32f32_f32f32|float")


def classify_gemm(name: str) -> str | None:
    """'tensor_core', 'fp32' or 'other' for a matmul kernel name, None for other kernels."""
    lowered = name.lower()
    if not _GEMM.search(lowered) or _NOT_GEMM.search(lowered):
        return None
    if _TENSOR_CORE.search(lowered):
        return "tensor_core"
    return "fp32" if _FP32.search(lowered) else "other"


# kernels of the libraries a compiler calls rather than generates (torch.compile's Inductor calls them as
# extern kernels, and fuses the rest): convolutions (cuDNN), attention (flash, memory-efficient, cuDNN's),
# CUTLASS, and cuBLAS's split-K reduction of a GEMM; GEMMs themselves by classify_gemm. cuDNN's batch norm
# is not among them: Inductor decomposes a norm into reductions and pointwise work it generates and fuses
_LIBRARY = re.compile(r"conv|fprop|dgrad|wgrad|cudnn|flash|fmha|attention|splitkreduce|cutlass")
_GENERATED = re.compile(r"bn_fw|bn_bw|batch_?norm|layer_?norm|group_?norm|instance_?norm")


@functools.lru_cache(maxsize=1 << 12)
def library_kernel(name: str) -> bool:
    """A matrix multiply, convolution or attention kernel of a library: what a compiler does not fuse."""
    lowered = name.lower()
    return classify_gemm(name) is not None or (bool(_LIBRARY.search(lowered)) and not _GENERATED.search(lowered))


@functools.lru_cache(maxsize=1 << 10)  # a few distinct memcpy names, repeated by every copy of a copy-heavy trace
def copy_kind(name: str) -> str:
    """'HtoD_pageable', 'DtoH_pinned', 'DtoD', ... from a kineto memcpy name."""
    match = _COPY_NAME.search(name)
    if not match:
        return "other"
    direction, src, dst = match.groups()
    host = (src if direction == "HtoD" else dst if direction == "DtoH" else "").lower()
    if not host:
        return direction
    kind = "pinned" if "pinned" in host else "pageable" if host.startswith("pag") else \
        "managed" if "managed" in host else "other"
    return f"{direction}_{kind}"


@functools.lru_cache(maxsize=1 << 16)  # a trace names a few hundred files in a million frames
def frame_kind(path: str) -> str | None:
    """'user', 'stdlib' or None (builtins, torch, installed packages) for a python_function file."""
    norm = path.replace("\\", "/")
    if norm.startswith("<") or "site-packages/" in norm or "dist-packages/" in norm:
        return None
    if "gpudoctor/agent/" in norm or "_gpudoctor_agent" in norm:
        return None  # gpudoctor's own agent, wherever it is installed (an editable install too)
    top = norm.split("/", 1)[0]
    module = top.removesuffix(".py")
    if module in _SKIPPED_PACKAGES:
        return None
    return "stdlib" if module in _STDLIB or re.search(r"/lib/python3[.\d]*/", norm) else "user"


def callee_name(frame: str) -> str:
    """A short name for what a Python frame is: 'Tensor.item', 'print', 'torch.cuda.synchronize'."""
    builtin = _BUILTIN.match(frame)
    if builtin:
        owner = builtin["owner"]
        return builtin["func"] or f"{'torch' if owner == 'type' else owner}.{builtin['method']}"
    match = _FRAME_NAME.match(frame)
    if not match:
        return frame[:80]
    module = re.sub(r"(/__init__)?\.py$", "", match["file"]).replace("/", ".")
    return f"{module}.{match['func']}"
