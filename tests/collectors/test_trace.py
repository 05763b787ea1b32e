"""gpudoctor.collectors.trace: synthetic kineto traces with known answers, and a real CPU trace.

The synthetic traces are built here event by event, in the format torch.profiler's
export_chrome_trace writes (checked against real H200 traces: category names, args
keys, memcpy names, kernel names). The real trace comes from torch.profiler on CPU,
so it holds operators and Python frames but no GPU events.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.collectors import trace_file
from gpudoctor.collectors.kineto_names import library_kernel
from gpudoctor.collectors.trace import (
    TraceError,
    callee_name,
    classify_gemm,
    copy_kind,
    frame_kind,
    load_trace,
    summarize_trace,
)

PID, TID = 4242, 4242


class TraceBuilder:
    """A synthetic kineto trace: host events on one thread, GPU events on device 0."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._next_id = 0

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _x(self, cat: str, name: str, ts: float, dur: float, pid: Any = PID, tid: Any = TID, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                            "args": args})

    def op(self, name: str, ts: float, dur: float) -> int:
        ext = self._id()
        self._x("cpu_op", name, ts, dur, **{"External id": ext})
        return ext

    def frame(self, name: str, ts: float, dur: float) -> None:
        self._x("python_function", name, ts, dur, **{"Python id": self._id()})

    def launch(self, ts: float, dur: float, api: str = "cudaLaunchKernel", ext: int | None = None,
               cat: str = "cuda_runtime") -> int:
        corr = self._id()
        args: dict[str, Any] = {"cbid": 211, "correlation": corr}
        if ext is not None:
            args["External id"] = ext
        self._x(cat, api, ts, dur, **args)
        return corr

    def api(self, name: str, ts: float, dur: float) -> None:
        self._x("cuda_runtime", name, ts, dur, cbid=131, correlation=self._id())

    def kernel(self, name: str, ts: float, dur: float, corr: int | None = None, ext: int | None = None,
               stream: int = 7) -> None:
        args: dict[str, Any] = {"device": 0, "stream": stream, "queued": 0}
        if corr is not None:
            args["correlation"] = corr
        if ext is not None:
            args["External id"] = ext
        self._x("kernel", name, ts, dur, pid=0, tid=stream, **args)

    def memcpy(self, name: str, ts: float, dur: float, nbytes: int, corr: int | None = None) -> None:
        self._x("gpu_memcpy", name, ts, dur, pid=0, tid=7, device=0, stream=7, correlation=corr, bytes=nbytes,
                **{"memory bandwidth (GB/s)": nbytes / dur / 1e3})

    def memset(self, ts: float, dur: float) -> None:
        self._x("gpu_memset", "Memset (Device)", ts, dur, pid=0, tid=7, device=0, stream=7, bytes=4)

    def data(self) -> dict[str, Any]:
        return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200",
                                                          "totalGlobalMem": 150109880320}],
                "traceEvents": [*self.events, {"ph": "M", "name": "process_name", "pid": PID, "tid": 0,
                                               "args": {"name": "python"}}]}


# ---- kernels, GPU busy/idle, launches ---------------------------------------------------
def test_kernel_statistics_histogram_median_and_top_kernels():
    t = TraceBuilder()
    for i, dur in enumerate([1.0, 3.0, 3.0, 7.0, 15.0, 40.0, 70.0, 500.0, 5000.0, 20000.0]):
        t.kernel("sgemm_kernel" if dur > 1000 else f"elementwise_{i % 2}", ts=i * 30000.0, dur=dur)
    s = summarize_trace(t.data())
    assert s.kernel_count == 10
    assert s.kernel_total_us == pytest.approx(25639.0)
    assert s.kernel_median_us == pytest.approx(27.5)
    assert list(s.kernel_duration_hist) == ["<2us", "2-5us", "5-10us", "10-20us", "20-50us", "50-100us",
                                            "100us-1ms", "1-10ms", ">10ms"]
    assert list(s.kernel_duration_hist.values()) == [1, 2, 1, 1, 1, 1, 1, 1, 1]
    assert s.top_kernels[0].name == "sgemm_kernel"
    assert (s.top_kernels[0].count, s.top_kernels[0].total_us, s.top_kernels[0].max_us) == (2, 25000.0, 20000.0)
    assert s.top_kernels[0].mean_us == pytest.approx(12500.0)
    assert s.matmul_fp32_us == pytest.approx(25000.0) and s.matmul_total_us == pytest.approx(25000.0)
    assert s.error is None


def test_busy_is_the_union_over_streams_and_gaps_are_classified_like_hta():
    t = TraceBuilder()
    # queued well ahead of the GPU: launches at 0, 1, 2, 3
    c1, c2, c3, c4 = (t.launch(ts=float(i), dur=1.0) for i in range(4))
    t.kernel("k1", 100.0, 50.0, c1, stream=7)  # 100-150
    t.kernel("k2", 120.0, 60.0, c2, stream=8)  # 120-180 on another stream: overlaps
    t.kernel("k3", 190.0, 10.0, c3)  # gap 10 us, queued in time: kernel-to-kernel
    t.kernel("k4", 300.0, 20.0, c4)  # gap 100 us, queued in time: other (a dependency)
    late = t.launch(ts=330.0, dur=5.0)  # launched after k4 ended at 320: host wait
    t.kernel("k5", 340.0, 10.0, late)
    t.kernel("k6", 400.0, 10.0)  # no launch record: a 50 us gap counts as host wait by length
    t.kernel("k7", 415.0, 5.0)  # no launch record: a 5 us gap is kernel-to-kernel
    s = summarize_trace(t.data())
    assert s.gpu_busy_us == pytest.approx(80 + 10 + 20 + 10 + 10 + 5)
    assert s.gpu_idle_us == pytest.approx(10 + 100 + 20 + 50 + 5)
    assert s.idle_gap_kernel_to_kernel_us == pytest.approx(15.0)
    assert s.idle_gap_other_us == pytest.approx(100.0)
    assert s.idle_gap_host_wait_us == pytest.approx(70.0)
    assert s.gpu_busy_us + s.gpu_idle_us == pytest.approx(420 - 100)


def test_launch_counts_and_short_kernels_follow_hta():
    t = TraceBuilder()
    short = t.launch(0.0, 5.0)
    t.kernel("tiny", 10.0, 2.0, short)  # 2 us on the GPU < 5 us to launch: short
    slow_launch = t.launch(20.0, 60.0, api="cudaLaunchKernelExC_v11060")  # over 50 us: an outlier
    t.kernel("tiny", 90.0, 2.0, slow_launch)
    long_kernel = t.launch(100.0, 5.0, api="cuLaunchKernel", cat="cuda_driver")
    t.kernel("big", 110.0, 10.0, long_kernel)
    t.launch(200.0, 8.0, api="cudaGraphLaunch")  # counts as a launch, never as short-kernel evidence
    t.api("cudaGetDevice", 210.0, 1.0)
    s = summarize_trace(t.data())
    assert s.launch_count == 4
    assert s.launch_total_us == pytest.approx(5 + 60 + 5 + 8)
    assert s.short_kernel_count == 1


def test_gpu_time_is_attributed_to_the_launching_operator():
    t = TraceBuilder()
    for i in range(3):  # aten::mm launches through its External id on the kernel
        ext = t.op("aten::mm", ts=i * 100.0, dur=20.0)
        corr = t.launch(i * 100.0 + 5, 4.0, ext=ext)
        t.kernel("gemm", i * 100.0 + 10, 30.0 + i, corr, ext=ext)
    ext = t.op("aten::add", ts=400.0, dur=10.0)  # kernel without External id: found through its launch
    corr = t.launch(402.0, 4.0, ext=ext)
    t.kernel("add", 410.0, 5.0, corr)
    s = summarize_trace(t.data())
    assert [(o.name, o.count) for o in s.top_ops] == [("aten::mm", 3), ("aten::add", 1)]
    assert s.top_ops[0].total_us == pytest.approx(93.0)
    assert s.top_ops[0].max_us == pytest.approx(32.0)
    assert s.top_ops[1].total_us == pytest.approx(5.0)


def test_copies_by_kind_bytes_small_copies_and_memsets():
    t = TraceBuilder()
    t.memcpy("Memcpy HtoD (Pageable -> Device)", 0.0, 100.0, 4 << 20)
    t.memcpy("Memcpy HtoD (Pagable -> Device)", 200.0, 5.0, 400)  # the spelling some kineto versions use
    t.memcpy("Memcpy HtoD (Pinned -> Device)", 300.0, 50.0, 4 << 20)
    t.memcpy("Memcpy DtoH (Device -> Pinned)", 400.0, 2.0, 4)
    t.memcpy("Memcpy DtoD (Device -> Device)", 500.0, 10.0, 1 << 20)
    t.memcpy("Memcpy PtoP (Device -> Device)", 600.0, 10.0, 1 << 20)
    t.memset(700.0, 3.0)
    s = summarize_trace(t.data())
    assert set(s.memcpy) == {"HtoD_pageable", "HtoD_pinned", "DtoH_pinned", "DtoD", "PtoP"}
    pageable = s.memcpy["HtoD_pageable"]
    assert (pageable["count"], pageable["bytes"], pageable["us"], pageable["small_count"]) == (
        2,
        (4 << 20) + 400,
        105.0,
        1,
    )
    assert s.memcpy["DtoH_pinned"]["small_count"] == 1
    assert (s.memset_count, s.memset_us) == (1, 3.0)
    assert s.kernel_count == 0 and s.error is None  # copies are GPU activity
    assert s.gpu_busy_us == pytest.approx(100 + 5 + 50 + 2 + 10 + 10 + 3)


@pytest.mark.parametrize("name, kind", [
    ("Memcpy HtoD (Pageable -> Device)", "HtoD_pageable"),
    ("Memcpy DtoH (Device -> Pageable)", "DtoH_pageable"),
    ("Memcpy DtoH (Device -> Pinned)", "DtoH_pinned"),
    ("Memcpy HtoD (Managed -> Device)", "HtoD_managed"),
    ("Memcpy HtoD (Unknown -> Device)", "HtoD_other"),
    ("Memcpy DtoD (Device -> Device)", "DtoD"),
    ("CopyHostToDevice", "other"),
])
def test_copy_kind(name, kind):
    assert copy_kind(name) == kind


# ---- matmul precision ------------------------------------------------------------------
@pytest.mark.parametrize("name, kind", [
    # seen on an H200 with torch 2.11 / CUDA 13
    (("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_"
      "kernel__5x_cublas"), "fp32"),
    ("void sgemm_largek_lds64<true, false, 5, 5, 4, 4, 4, 34>(float*, float const*, float const*, int)", "fp32"),
    (("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(cutlass_80_simt_sgemm_128x64_8x5_nn_"
      "align1::Params)"), "fp32"),
    (("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_"
      "kernel__5x_cublas"), "tensor_core"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "tensor_core"),
    # common on Ampere/Volta
    ("ampere_sgemm_128x64_nn", "fp32"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn", "tensor_core"),
    ("volta_h884gemm_64x64_ldg8_nn", "tensor_core"),
    ("cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4", "tensor_core"),
    ("void gemmSN_TN_kernel<float, 256, 4, 2, 8, 4, 4, false, cublasGemvTensorStridedBatched<float const> >",
     "fp32"),
    ("dgemm_kernel", "other"),
    # not matmuls
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false>", None),
    ("implicit_convolve_sgemm", None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >", None),
])
def test_classify_gemm(name, kind):
    assert classify_gemm(name) == kind


@pytest.mark.parametrize("name, library", [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", True),  # a GEMM
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false>", True),  # a GEMM's
    ("implicit_convolve_sgemm", True),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nchw", True),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false>>", True),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", False),
    ("triton_poi_fused_add_gelu_0", False),
    ("triton_per_fused_native_layer_norm_1", False),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", False),
    # cuDNN's batch norm: a norm Inductor decomposes and fuses (ResNet-50 training on an H100)
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct)", False),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float)", False),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>", True),
])
def test_library_kernels_are_what_a_compiler_calls_rather_than_fuses(name, library):
    assert library_kernel(name) is library


def test_matmul_totals_and_tf32_inferred_from_a_tf32_kernel():
    t = TraceBuilder()
    t.kernel("ampere_sgemm_128x64_nn", 0.0, 100.0)
    t.kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32", 200.0, 30.0)
    t.kernel("dgemm_kernel", 300.0, 5.0)
    t.kernel("elementwise", 400.0, 7.0)
    s = summarize_trace(t.data())
    assert (s.matmul_fp32_us, s.matmul_tensor_core_us, s.matmul_total_us) == (100.0, 30.0, 135.0)
    assert s.tf32_enabled is True
    t2 = TraceBuilder()
    t2.kernel("ampere_sgemm_128x64_nn", 0.0, 100.0)
    assert summarize_trace(t2.data()).tf32_enabled is None  # fp32 kernels alone do not prove TF32 was off


# ---- synchronisations -------------------------------------------------------------------
def _sync_trace() -> TraceBuilder:
    """Two steps of: kernel, then loss.item() (sync inside aten::item), then a gap."""
    t = TraceBuilder()
    for step in range(2):
        base = step * 1000.0
        t.frame("train.py(3): <module>", base, 900.0)
        t.frame("train.py(10): train_step", base + 1, 800.0)
        corr = t.launch(base + 5, 5.0)
        t.kernel("big_kernel", base + 20, 200.0, corr)  # GPU runs dry at base+220
        t.frame("<built-in method item of Tensor object at 0x7f00>", base + 50, 200.0)
        t.op("aten::item", base + 51, 198.0)
        t.op("aten::_local_scalar_dense", base + 52, 196.0)
        t.api("cudaMemcpyAsync", base + 53, 5.0)
        t.api("cudaStreamSynchronize", base + 60, 165.0)  # returns at base+225, after the GPU ran dry
        corr = t.launch(base + 300, 5.0)
        t.kernel("next_kernel", base + 310, 100.0, corr)  # gap base+220 .. base+310 follows the sync
    # a bare torch.cuda.synchronize() at the end, called through torch and the stdlib
    t.frame("train.py(3): <module>", 2000.0, 100.0)
    t.frame("logging/__init__.py(1500): info", 2001.0, 90.0)
    t.frame("torch/cuda/__init__.py(1152): synchronize", 2002.0, 80.0)
    t.api("cudaDeviceSynchronize", 2005.0, 20.0)
    return t


def test_syncs_are_counted_named_after_their_operator_and_placed_in_user_code():
    s = summarize_trace(_sync_trace().data(), steps=2)
    assert s.steps == 2
    assert s.sync_count == 3
    assert s.sync_total_us == pytest.approx(165 * 2 + 20)
    item, device = s.sync_sites
    assert (item.api, item.count, item.total_us) == ("aten::item", 2, 330.0)
    assert item.site == "train_step (train.py:10) -> Tensor.item"
    # the stdlib frame (logging) is skipped: the innermost frame of user code is <module>
    assert (device.api, device.site) == ("cudaDeviceSynchronize", "<module> (train.py:3) -> logging.info")
    assert s.idle_after_sync_us == pytest.approx(2 * 90.0)
    assert s.idle_gap_host_wait_us == pytest.approx(2 * 90.0 + 610.0)  # each launched after the GPU ran dry


def test_the_agents_own_sync_closing_the_window_is_not_the_workloads():
    # seen on the H200: the profiler's stop() synchronises once, called from gpudoctor's agent
    t = _sync_trace()
    t.frame("train.py(3): <module>", 2100.0, 100.0)
    t.frame("/venv/site-packages/gpudoctor/agent/profiler.py(82): stop", 2101.0, 90.0)
    t.api("cudaDeviceSynchronize", 2105.0, 30.0)
    s = summarize_trace(t.data(), steps=2)
    assert s.sync_count == 3 and s.sync_total_us == pytest.approx(165 * 2 + 20)
    assert all("agent" not in (site.site or "") for site in s.sync_sites)


def test_gaps_while_a_sync_waits_for_queued_work_are_not_blamed_on_the_sync():
    t = TraceBuilder()
    c1, c2 = t.launch(0.0, 5.0), t.launch(6.0, 5.0)
    t.kernel("k1", 20.0, 100.0, c1)
    t.kernel("k2", 125.0, 100.0, c2)  # a 5 us gap while the host still waits in the sync
    t.api("cudaDeviceSynchronize", 15.0, 212.0)
    s = summarize_trace(t.data())
    assert s.idle_gap_kernel_to_kernel_us == pytest.approx(5.0)
    assert s.idle_after_sync_us == 0.0


@pytest.mark.parametrize("path, kind", [
    ("train.py", "user"), ("/home/me/proj/model.py", "user"), ("mypkg/loop.py", "user"),
    ("torch/nn/modules/module.py", None), ("torchvision/io.py", None), ("gpudoctor/agent/torch_hooks.py", None),
    ("/usr/lib/python3/dist-packages/foo.py", None), ("/venv/lib/python3.11/site-packages/transformers/x.py", None),
    ("<frozen importlib._bootstrap>", None), ("typing.py", "stdlib"), ("logging/__init__.py", "stdlib"),
])
def test_frame_kind(path, kind):
    assert frame_kind(path) == kind


@pytest.mark.parametrize("frame, name", [
    ("<built-in method item of Tensor object at 0x7f8564199810>", "Tensor.item"),
    ("<built-in method relu of type object at 0x7fd2758cea40>", "torch.relu"),
    ("<built-in function print>", "print"),
    ("torch/cuda/__init__.py(1152): synchronize", "torch.cuda.synchronize"),
    ("torch/_tensor.py(558): __repr__", "torch._tensor.__repr__"),
    ("nn.Module: Linear_0", "nn.Module: Linear_0"),
])
def test_callee_name(frame, name):
    assert callee_name(frame) == name


# ---- steps, errors, robustness ------------------------------------------------------------
def test_steps_are_counted_from_profiler_step_ranges_unless_given():
    t = TraceBuilder()
    for i in range(3):
        t._x("user_annotation", f"ProfilerStep#{i + 5}", i * 100.0, 90.0, **{"External id": 900 + i})
        t.kernel("k", i * 100.0 + 10, 5.0)
    assert summarize_trace(t.data()).steps == 3
    assert summarize_trace(t.data(), steps=7).steps == 7


def test_a_trace_without_gpu_activity_says_so():
    t = TraceBuilder()
    t.op("aten::mm", 0.0, 50.0)
    s = summarize_trace(t.data())
    assert s.kernel_count == 0 and s.gpu_busy_us == 0.0 and s.kernel_median_us is None
    assert "CPU-only" in (s.error or "")
    t.launch(60.0, 5.0)  # CUDA calls recorded, but no GPU activity (ProfilerActivity.CUDA missing)
    assert "ProfilerActivity.CUDA" in (summarize_trace(t.data()).error or "")


def test_malformed_events_are_skipped_and_an_empty_trace_is_an_error():
    t = TraceBuilder()
    t.kernel("k", 0.0, 5.0)
    data = t.data()
    data["traceEvents"] += [{"ph": "X", "name": "bad", "ts": "soon", "dur": 1}, {"ph": "X", "ts": 1.0, "dur": -2},
                            "not an event", None, {"ph": "X", "name": 7, "ts": 1.0, "dur": 1.0}]
    assert summarize_trace(data).kernel_count == 1
    with pytest.raises(TraceError, match="no complete"):
        summarize_trace({"traceEvents": [{"ph": "M", "name": "process_name"}]})
    assert summarize_trace(list(t.data()["traceEvents"])).kernel_count == 1  # a bare event array


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(1, 300), st.integers(7, 9)), min_size=1, max_size=40))
def test_busy_plus_idle_is_the_span_and_busy_is_the_union(intervals):
    t = TraceBuilder()
    covered: set[int] = set()
    for start, dur, stream in intervals:
        t.kernel("k", float(start), float(dur), stream=stream)
        covered.update(range(start, start + dur))
    s = summarize_trace(t.data())
    first, last = min(i[0] for i in intervals), max(i[0] + i[1] for i in intervals)
    assert s.gpu_busy_us == pytest.approx(len(covered))
    assert s.gpu_busy_us + s.gpu_idle_us == pytest.approx(last - first)
    assert s.gpu_idle_us == pytest.approx(
        s.idle_gap_kernel_to_kernel_us + s.idle_gap_host_wait_us + s.idle_gap_other_us)


# ---- reading files --------------------------------------------------------------------------
def _write(path: Path, data: Any, gz: bool = False) -> Path:
    raw = json.dumps(data).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def test_json_and_gzip_files_are_read_by_content(tmp_path):
    t = TraceBuilder()
    t.kernel("k", 0.0, 5.0)
    plain = _write(tmp_path / "a.json", t.data())
    packed = _write(tmp_path / "b.json", t.data(), gz=True)  # gzip without the .gz suffix
    assert summarize_trace(plain).kernel_count == summarize_trace(packed).kernel_count == 1


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"{\"traceEvents\": [", "not valid JSON"),
    (b"\x00\x01binary", "not valid JSON"),
    (b"{\"hello\": 1}", "no traceEvents"),
    (b"[1, 2", "not valid JSON"),
    (json.dumps({"schema": "gpudoctor.report/1", "findings": []}).encode(), "gpudoctor report"),
])
def test_bad_files_raise_trace_error(tmp_path, content, message):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as err:
        summarize_trace(path)
    assert not err.value.not_found


def test_truncated_gzip_missing_file_directory_and_size_limit(tmp_path, monkeypatch):
    t = TraceBuilder()
    t.kernel("k", 0.0, 5.0)
    whole = gzip.compress(json.dumps(t.data()).encode())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceError, match="truncated gzip"):
        load_trace(cut)
    with pytest.raises(TraceError, match="no such file") as err:
        load_trace(tmp_path / "missing.json")
    assert err.value.not_found
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trace-12.json").write_text("{}")
    with pytest.raises(TraceError, match=r"is a directory.*trace-12\.json") as err:
        load_trace(tmp_path / "run")
    assert err.value.not_found
    big = _write(tmp_path / "big.json", t.data())
    monkeypatch.setattr(trace_file, "MAX_TRACE_BYTES", 100)
    with pytest.raises(TraceError, match="larger than"):
        load_trace(big)


# ---- a real trace, recorded here on CPU ------------------------------------------------------
def _sum_item(x):  # the user function the real trace must find around .item()
    return (x @ x).relu().sum().item()


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory) -> Path:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(3):
            _sum_item(x)
    path = tmp_path_factory.mktemp("trace") / "cpu.json"
    prof.export_chrome_trace(str(path))
    return path


def test_real_cpu_trace_parses_with_no_gpu_statistics(cpu_trace):
    s = summarize_trace(cpu_trace)
    assert s.kernel_count == 0 and s.launch_count == 0 and s.sync_count == 0 and not s.memcpy
    assert s.gpu_busy_us == 0.0 and s.kernel_median_us is None and s.short_kernel_count == 0
    assert s.error and "CPU-only" in s.error
    assert 0 < s.window_s < 60
    names = [o.name for o in s.top_ops]  # by CPU self time: nothing ran on a GPU
    assert "aten::mm" in names
    assert all(o.count >= 1 and o.total_us >= 0 for o in s.top_ops)
    packed = cpu_trace.with_name("cpu.json.gz")
    packed.write_bytes(gzip.compress(cpu_trace.read_bytes()))
    assert summarize_trace(packed).top_ops == s.top_ops


def test_real_cpu_trace_python_frames_locate_a_sync(cpu_trace):
    """Real operators and python_function events, plus a synthetic CUDA sync inside each
    aten::item: the site must be this test module's function, calling Tensor.item."""
    data = json.loads(cpu_trace.read_text())
    items = [e for e in data["traceEvents"] if e.get("ph") == "X" and e.get("name") == "aten::item"]
    assert len(items) == 3
    for e in items:
        data["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize",
                                    "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"] / 2, "dur": 0.1,
                                    "args": {"cbid": 131, "correlation": 1}})
    s = summarize_trace(data)
    assert s.sync_count == 3
    (site,) = s.sync_sites
    assert site.api == "aten::item"
    assert site.site is not None and site.site.startswith("_sum_item (test_trace.py:")
    assert site.site.endswith("-> Tensor.item")


def test_nccl_kernels_give_communication_time_and_its_overlap_with_compute():
    t = TraceBuilder()
    # compute on stream 7: 0-100 and 300-400 us; all-reduce on stream 20: 50-150 and 200-350 us
    t.kernel("ampere_bf16_gemm", ts=0.0, dur=100.0, stream=7)
    t.kernel("ampere_bf16_gemm", ts=300.0, dur=100.0, stream=7)
    t.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", ts=50.0,
             dur=100.0, stream=20)
    t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", ts=200.0, dur=150.0, stream=20)
    s = summarize_trace(t.data())
    assert s.comm_kernel_count == 2
    assert s.comm_us == pytest.approx(250.0)
    assert s.comm_overlap_us == pytest.approx(50.0 + 50.0)  # 50-100 and 300-350
    assert s.kernel_count == 4  # collectives are kernels too


def test_no_nccl_kernels_no_communication():
    t = TraceBuilder()
    t.kernel("elementwise", ts=0.0, dur=10.0)
    s = summarize_trace(t.data())
    assert (s.comm_kernel_count, s.comm_us, s.comm_overlap_us) == (0, 0.0, 0.0)


@pytest.mark.parametrize("sizes", [[4 << 20, 400, 0, -3, 2.7, None, 65535.9], [True, 10], [1e300, 5],
                                   [float("nan"), 7], [2 ** 60, 1], ["12", 3]])
def test_copy_sizes_add_up_as_one_by_one_whatever_they_hold(sizes, monkeypatch):
    """Real sizes are added as arrays; a size of any other kind sends the copies one by one. Both
    count a size as the copy's whole bytes (0 when not a number) the same way."""
    import gpudoctor.collectors.trace as trace_module

    def totals(plain: bool) -> dict:
        monkeypatch.setattr(trace_module, "_plain_sizes", lambda values: plain and _real(values))
        t = TraceBuilder()
        for n in range(len(sizes)):
            t.memcpy("Memcpy HtoD (Pageable -> Device)" if n % 2 else "Memcpy DtoH (Device -> Pinned)",
                     100.0 * n, 1.5 + n, 0)
        data = t.data()
        for event, size in zip((e for e in data["traceEvents"] if e.get("cat") == "gpu_memcpy"), sizes):
            event["args"]["bytes"] = size
        return summarize_trace(data).memcpy

    _real = trace_module._plain_sizes
    assert totals(True) == totals(False)
