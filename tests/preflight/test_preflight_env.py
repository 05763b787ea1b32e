"""PF5xx with monkeypatched environments and torch facts."""

from __future__ import annotations

import pytest
from preflight_helpers import idle_gpu

from gpudoctor.preflight import env
from gpudoctor.preflight.context import TorchFacts
from gpudoctor.preflight.model import Unread


@pytest.mark.parametrize("value, status", [(None, "pass"), ("0", "pass"), ("1", "fail"), ("yes", "warn")])
def test_launch_blocking(make_ctx, value, status) -> None:
    environ = {} if value is None else {"CUDA_LAUNCH_BLOCKING": value}
    assert env.launch_blocking(make_ctx(environ=environ)).status == status


@pytest.mark.parametrize("environ, status, text", [
    ({}, "pass", "torch's allocator defaults"),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "pass", "expandable_segments:True"),
    ({"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:[256:1,512:2,>:8],max_split_size_mb:128"}, "pass", ""),
    ({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:20"}, "fail", "more than 20"),
    ({"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:1.5"}, "fail", "(0, 1)"),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments"}, "fail", "not key:value"),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:yes"}, "fail", "True or False"),
    ({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, "pass", ""),
    ({"PYTORCH_ALLOC_CONF": "future_knob:3"}, "warn", "unknown key 'future_knob'"),
    ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, "fail", "disables the caching allocator"),
])
def test_alloc_conf(make_ctx, environ, status, text) -> None:
    result = env.alloc_conf(make_ctx(environ=environ))
    assert result.status == status, result.found
    assert text in result.found


@pytest.mark.parametrize("value, status, text", [
    ("0,1", "pass", "2 of 2 GPUs"),
    ("1", "pass", "1 of 2 GPUs"),
    ("GPU-1111", "pass", "1 of 2 GPUs"),
    ("", "fail", "no GPU visible"),
    ("-1", "fail", "no GPU visible"),
    ("0,5,1", "fail", "entry '5' names no GPU: CUDA ignores it and everything after it (5, 1)"),
    ("0,0", "fail", "repeats a GPU"),
])
def test_cuda_visible_devices(make_ctx, value, status, text) -> None:
    result = env.visible_devices(make_ctx([idle_gpu(0), idle_gpu(1)], environ={"CUDA_VISIBLE_DEVICES": value}))
    assert result.status == status and text in result.found, result.found


def test_cuda_visible_devices_without_nvml(tmp_path) -> None:
    import pynvml
    from preflight_helpers import CUDA_TORCH, FakeNvml

    from gpudoctor.preflight import gpu_facts
    from gpudoctor.preflight.context import Context

    facts = gpu_facts.read(FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    ctx = Context(nvml=facts, torch=CUDA_TORCH, environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert env.visible_devices(ctx).status == "not-checked"


def test_nccl_settings(make_ctx) -> None:
    bad = {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO", "TORCH_NCCL_BLOCKING_WAIT": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    result = env.nccl_settings(make_ctx(environ=bad))
    assert result.status == "warn"
    assert "NCCL_P2P_DISABLE=1" in result.found and "NCCL_DEBUG=INFO" in result.found
    assert "NCCL_SOCKET_IFNAME" not in result.found
    fine = env.nccl_settings(make_ctx(environ={"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "eth0"}))
    assert fine.status == "pass" and "NCCL_SOCKET_IFNAME=eth0" in fine.found


def test_torch_cuda_build(make_ctx) -> None:
    cpu = TorchFacts(version="2.11.0+cpu", cuda=None, device_count=Unread("torch is built without CUDA"))
    result = env.torch_cuda_build(make_ctx(torch=cpu))
    assert result.status == "fail" and "CPU-only build" in result.found
    assert env.torch_cuda_build(make_ctx()).status == "pass"
    missing = env.torch_cuda_build(make_ctx(torch=TorchFacts(version=Unread("torch is not importable: ImportError"))))
    assert missing.status == "not-checked"
    rocm = env.torch_cuda_build(make_ctx(torch=TorchFacts(version="2.11.0+rocm6.4", cuda=None, hip="6.4")))
    assert rocm.status == "not-checked" and "ROCm" in (rocm.reason or "")
