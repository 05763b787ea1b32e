"""Hotspots from profiler traces: real H200 windows, and a CPU-only window recorded here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpudoctor.analysis.windows import hotspots
from gpudoctor.collectors.hotspots import AUTOGRAD
from gpudoctor.collectors.trace import summarize_trace

WINDOWS = Path(__file__).resolve().parent.parent / "fixtures" / "h200" / "windows"


def sites(summary):
    return {s.site: s for s in summary.call_sites}


def test_call_sites_of_a_loop_that_syncs_launch_and_block():
    summary = summarize_trace(WINDOWS / "item_sync.trace.json.gz")
    found = sites(summary)
    gather = found["<genexpr> (item_sync.py:26)"]  # the .item() per layer
    assert gather.syncs == 120 and gather.blocked_us > 700 and gather.launches > 0
    assert found["main (item_sync.py:28)"].gpu_us > 2000
    assert found[AUTOGRAD].gpu_us > 3000 and found[AUTOGRAD].syncs == 0  # backward kernels: no Python frame
    gpu_total = summary.kernel_total_us + sum(v["us"] for v in summary.memcpy.values()) + summary.memset_us
    assert sum(s.gpu_us for s in summary.call_sites) <= gpu_total + 1
    assert max(summary.call_sites, key=lambda s: s.blocked_us).site == "<genexpr> (item_sync.py:26)"


def test_the_launch_bound_loop_names_its_line_and_its_cheap_ops():
    summary = summarize_trace(WINDOWS / "tiny_kernels.trace.json.gz")
    top = summary.call_sites[0]
    assert top.site == "main (tiny_kernels.py:24)" and top.launches > 10_000
    names = [op.name for op in summary.top_cpu_ops]
    assert names[0] == "aten::mul_" and all(n.startswith("aten::") for n in names)
    totals = [op.total_us for op in summary.top_cpu_ops]
    assert totals == sorted(totals, reverse=True) and len(totals) == 10
    table = hotspots(summary)
    assert table["call_sites"][0]["gpu_share"] == pytest.approx(
        top.gpu_us / sum(s.gpu_us for s in summary.call_sites), abs=1e-4
    )
    assert table["kernels"][0]["share_of_kernel_time"] > 0


def test_cpu_work_in_the_loader_is_a_call_site_of_its_own():
    summary = summarize_trace(WINDOWS / "starved_loader.trace.json.gz")
    busiest = max(summary.call_sites, key=lambda s: s.cpu_us)
    assert busiest.site.startswith("__getitem__ (gpudoctor/demo/workload.py:")
    assert summary.top_cpu_ops[0].name == "aten::mkldnn_convolution"


def busy_cpu_function(x):
    for _ in range(20):
        x = torch.nn.functional.conv1d(x, torch.ones(4, 4, 3), padding=1)
    return x


def test_a_cpu_only_window_gets_the_same_table(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(1, 4, 256)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        busy_cpu_function(x)
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    summary = summarize_trace(path)
    assert summary.kernel_count == 0 and summary.error and "CPU-only" in summary.error
    assert any("conv" in op.name for op in summary.top_cpu_ops[:3])
    site = max(summary.call_sites, key=lambda s: s.cpu_us)
    assert site.site.startswith("busy_cpu_function (") and "test_hotspots.py" in site.site
    assert site.gpu_us == 0 and site.cpu_us > 0
    assert hotspots(summary)["cpu_ops"]


def test_the_agent_is_never_the_workloads_call_site_even_from_an_editable_install():
    from gpudoctor.collectors.hotspots import _innermost
    from gpudoctor.collectors.kineto_names import frame_kind

    assert frame_kind("/home/me/src/gpudoctor/gpudoctor/agent/torch_hooks.py") is None
    assert frame_kind("/home/me/project/train.py") == "user"
    frames = [
        "/home/me/venv/lib/python3.11/site-packages/transformers/trainer.py(2100): train",
        "/home/me/src/gpudoctor/gpudoctor/agent/torch_hooks.py(140): fetch",
        "/home/me/venv/lib/python3.11/site-packages/torch/nn/modules/module.py(1750): _call_impl",
    ]
    assert _innermost(frames) == "train (transformers/trainer.py:2100)"


def test_work_inside_the_agents_transparent_wrappers_is_the_workloads():
    """A sync made through a safe-point wrapper (a stepless window) counts; one made while
    the agent closes its window does not."""

    def frame(name, ts, dur, tid=1):
        return {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    def sync(ts, correlation):
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaStreamSynchronize",
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "dur": 5.0,
            "args": {"correlation": correlation},
        }

    events = [
        frame("loop.py(3): <module>", 0.0, 1000.0),
        frame("/src/gpudoctor/gpudoctor/agent/safepoints.py(81): wrapper", 10.0, 20.0),
        sync(12.0, 1),
        frame("/src/gpudoctor/gpudoctor/agent/profiler.py(200): stop", 100.0, 50.0),
        sync(110.0, 2),
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 40.0,
            "dur": 2.0,
            "args": {"correlation": 3, "device": 0},
        },
    ]
    summary = summarize_trace({"traceEvents": events})
    assert summary.sync_count == 1
    (site,) = [s for s in summary.call_sites if s.syncs]
    assert site.site == "<module> (loop.py:3)" and site.syncs == 1
