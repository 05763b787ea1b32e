"""Compact statistics of a torch.profiler (kineto) Chrome trace: a ProfileSummary.

The input is what ``prof.export_chrome_trace(path)`` writes (JSON, or the same
gzip-compressed): a ``traceEvents`` list of complete events (``ph: "X"``, ``ts`` and
``dur`` in microseconds). Categories used here: ``kernel``, ``gpu_memcpy`` and
``gpu_memset`` (GPU side, one ``tid`` per stream), ``cuda_runtime`` / ``cuda_driver``
(the host's CUDA API calls), ``cpu_op`` and ``user_annotation`` (operators and
``record_function`` ranges), ``python_function`` (with ``with_stack=True``). A GPU
event and the API call that queued it share ``args.correlation`` (the ``ac2g`` flow
arrows draw that link); a GPU event and the operator that launched it share
``args["External id"]``.

Definitions, after Holistic Trace Analysis (HTA) where it has one:

- GPU busy time: the union of kernel, memcpy and memset intervals over all streams of
  the busiest device, between its first start and its last end; idle is the rest.
- Idle gaps: a gap is a *host wait* when the call that queued the next GPU work
  started after the GPU had run dry (the host was late), *kernel-to-kernel* when the
  work was queued in time and the gap is under 30 us (HTA's launch-delay threshold),
  *other* when it was queued in time and the gap is longer (a dependency, not the
  host). Without a launch record a gap is classified by its length alone.
- Short kernel: GPU time below the CPU time of its own launch call, that call taking
  at most 50 us (HTA's kernel launch statistics).
- Top operators: GPU time of the work each operator launched (by External id, else
  through the launch call); when nothing can be attributed (CPU-only traces), the
  operators' own (self) CPU time.
- Host synchronisations: blocking CUDA calls (stream/device/event synchronize,
  synchronous memcpy). Each is named after the outermost ATen operator around it
  (``aten::item`` for ``.item()``, ``aten::to`` for ``.cpu()``) and located at the
  innermost Python frame around it that is neither torch, an installed package nor
  the standard library.

Only statistics are kept: the raw events are read once and dropped.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import statistics
import sys
import zlib
from array import array
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from gpudoctor.session import KernelStat, ProfileSummary, SyncSite

log = logging.getLogger(__name__)

MAX_TRACE_BYTES = 1 << 30  # uncompressed; parsed JSON costs several times that in memory
KERNEL_TO_KERNEL_GAP_US = 30.0  # HTA: shorter gaps are the cost of launching back to back
SHORT_LAUNCH_MAX_US = 50.0  # HTA: launch calls longer than this are outliers, not "short kernel" evidence
SMALL_COPY_BYTES = 64 * 1024  # Nsight Systems ignores synchronous H2D copies below this size
TOP_N = 10
MAX_NAME_CHARS = 300  # C++ template kernel names run to kilobytes

HIST_BUCKETS: tuple[tuple[float, str], ...] = (
    (2.0, "<2us"), (5.0, "2-5us"), (10.0, "5-10us"), (20.0, "10-20us"), (50.0, "20-50us"),
    (100.0, "50-100us"), (1000.0, "100us-1ms"), (10000.0, "1-10ms"), (float("inf"), ">10ms"),
)

_GPU_CATEGORIES = {"kernel": "k", "gpu_memcpy": "c", "memcpy": "c", "gpu_memset": "s", "memset": "s"}
_API_CATEGORIES = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
KERNEL_LAUNCH_APIS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel",
})
GRAPH_LAUNCH_APIS = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
SYNC_APIS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
    "cudaMemcpy3D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol", "cuStreamSynchronize", "cuCtxSynchronize",
    "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpy", "hipStreamSynchronize",
    "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy",
})
_VERSION_SUFFIX = re.compile(r"_v\d+$")
_COPY_NAME = re.compile(r"Memcpy (\w+) \(([^()]*?) -> ([^()]*?)\)")
_FRAME_NAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")
_SKIPPED_PACKAGES = frozenset({"torch", "torchvision", "torchaudio", "functorch", "triton", "numpy", "gpudoctor",
                               "_gpudoctor_agent", "sitecustomize"})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))

# GEMM kernels by name. Tensor-core markers: 16-bit and 8-bit types, TF32, MMA instruction
# families (h884, s1688, s16816 ... hmma, wgmma), CUTLASS "tensorop", cuBLASLt's nvjet.
_GEMM = re.compile(r"gemm|gemv|nvjet|wgmma")
_NOT_GEMM = re.compile(r"conv|fprop|dgrad|wgrad|splitkreduce")
_TENSOR_CORE = re.compile(
    r"tf32|bf16|bfloat16|f16|half|fp8|e4m3|e5m2|int8|i8816|imma|hmma|wgmma|tensorop|tensor\d+x\d+|nvjet"
    r"|[hsi]\d{3,5}gemm"
)
_FP32 = re.compile(r"sgemm|simt|ffma|f32f32_f32f32|float")


class TraceError(Exception):
    """A trace that cannot be read; `not_found` tells a missing file from a bad one."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


def load_trace(path: str | Path, max_bytes: int | None = None) -> Any:
    """Read a Chrome trace (.json or gzip, told apart by content) into plain JSON data."""
    path = Path(path)
    limit = MAX_TRACE_BYTES if max_bytes is None else max_bytes
    if not path.exists():
        raise TraceError(f"{path}: no such file", not_found=True)
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*trace*.json*"))[:3]
        hint = f" (it holds {', '.join(found)})" if found else ""
        raise TraceError(f"{path}: is a directory, expected a trace file (.json or .json.gz){hint}", not_found=True)
    try:
        with open(path, "rb") as fh:
            compressed = fh.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if compressed else open(path, "rb")) as fh:
            raw = fh.read(limit + 1)
    except (EOFError, zlib.error, gzip.BadGzipFile):
        raise TraceError(f"{path}: corrupt or truncated gzip file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})", not_found=True) from None
    if len(raw) > limit:
        raise TraceError(f"{path}: trace larger than {limit / 2**20:,.0f} MiB uncompressed; "
                         "profile fewer steps (or fewer ranks per file) and try again")
    if not raw.strip():
        raise TraceError(f"{path}: empty file")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        kind = "gzip-compressed " if compressed else ""
        raise TraceError(f"{path}: {kind}file is not valid JSON (corrupt or truncated trace?)") from None


def trace_events(data: Any) -> list:
    """The event list of Chrome-trace data, or TraceError when it is something else."""
    if isinstance(data, list):
        return data
    if isinstance(data, Mapping):
        events = data.get("traceEvents")
        if isinstance(events, list):
            return events
        schema = str(data.get("schema", ""))
        if schema.startswith("gpudoctor."):
            raise TraceError(f"this is a gpudoctor {schema.split('.')[1].split('/')[0]} file, not a profiler "
                             "trace (use `gpudoctor report` to re-render it)")
    raise TraceError("not a Chrome/kineto trace: no traceEvents list (expected torch.profiler's export_chrome_trace)")


def summarize_trace(source: str | Path | Mapping[str, Any] | list, steps: int = 0) -> ProfileSummary:
    """Statistics of one profiler trace: a path (JSON or .json.gz) or already-loaded data.

    `steps` is the number of steps the trace covers; 0 counts ``ProfilerStep#N`` ranges.
    Raises TraceError for unreadable input. A trace without GPU activity is not an error:
    it gives ``kernel_count == 0`` and says why in ``error``.
    """
    data = load_trace(source) if isinstance(source, (str, Path)) else source
    stats = _TraceStats()
    for event in trace_events(data):
        stats.add(event)
    del data
    if stats.events == 0:
        raise TraceError("the trace holds no complete (ph 'X') events" +
                         (f"; {stats.malformed} malformed" if stats.malformed else ""))
    if stats.malformed:
        log.debug("skipped %d malformed trace events", stats.malformed)
    return stats.summary(steps)


def classify_gemm(name: str) -> str | None:
    """'tensor_core', 'fp32' or 'other' for a matmul kernel name, None for other kernels."""
    lowered = name.lower()
    if not _GEMM.search(lowered) or _NOT_GEMM.search(lowered):
        return None
    if _TENSOR_CORE.search(lowered):
        return "tensor_core"
    return "fp32" if _FP32.search(lowered) else "other"


def copy_kind(name: str) -> str:
    """'HtoD_pageable', 'DtoH_pinned', 'DtoD', ... from a kineto memcpy name."""
    match = _COPY_NAME.search(name)
    if not match:
        return "other"
    direction, src, dst = match.groups()
    host = src if direction == "HtoD" else dst if direction == "DtoH" else None
    if host is None:
        return direction
    host = host.lower()
    kind = "pinned" if "pinned" in host else "pageable" if host.startswith("pag") else \
        "managed" if "managed" in host else "other"
    return f"{direction}_{kind}"


def frame_kind(path: str) -> str | None:
    """'user', 'stdlib' or None (builtins, torch, installed packages) for a python_function file."""
    if path.startswith("<"):
        return None
    norm = path.replace("\\", "/")
    if "site-packages/" in norm or "dist-packages/" in norm:
        return None
    top = norm.split("/", 1)[0]
    module = top[:-3] if top.endswith(".py") else top
    if module in _SKIPPED_PACKAGES:
        return None
    if module in _STDLIB or re.search(r"/lib/python3[.\d]*/", norm):
        return "stdlib"
    return "user"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


class _TraceStats:
    """One pass over the events, keeping compact tuples only for what needs a second look."""

    def __init__(self) -> None:
        self.events = self.malformed = 0
        self.first, self.last = float("inf"), float("-inf")
        self.kernels: dict[str, list[float]] = {}  # name -> [count, total us, max us]
        self.kernel_durations = array("d")
        self.gpu: list[tuple[float, float, Any, Any, Any, str]] = []  # start, end, device, corr, ext id, kind
        self.memcpy: dict[str, dict[str, float]] = {}
        self.memset_count, self.memset_us = 0, 0.0
        self.launches: dict[Any, tuple[float, float, str, Any]] = {}  # corr -> ts, dur, api, ext id
        self.launch_count, self.launch_us = 0, 0.0
        self.syncs: list[tuple[Any, float, float, str]] = []  # thread, ts, dur, api
        self.ops: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)  # per thread
        self.op_names: dict[Any, str] = {}  # External id -> operator
        self.frames: dict[Any, list[tuple[float, float, str, bool]]] = defaultdict(list)
        self.step_names: set[str] = set()
        self._names: dict[str, str] = {}

    def _intern(self, name: str) -> str:
        return self._names.setdefault(name, name)

    def add(self, event: Any) -> None:
        if not isinstance(event, dict) or event.get("ph") != "X":
            return
        ts, dur, name = _number(event.get("ts")), _number(event.get("dur")), event.get("name")
        if ts is None or dur is None or dur < 0 or not isinstance(name, str):
            self.malformed += 1
            return
        self.events += 1
        category = str(event.get("cat", "")).lower()
        if category == "trace":  # the profiler's own span, not activity
            return
        end = ts + dur
        self.first, self.last = min(self.first, ts), max(self.last, end)
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        thread = (event.get("pid"), event.get("tid"))
        kind = _GPU_CATEGORIES.get(category)
        if kind is not None:
            self._add_gpu(kind, name, ts, dur, event, args)
        elif category in _API_CATEGORIES:
            api = _VERSION_SUFFIX.sub("", name)
            if api in KERNEL_LAUNCH_APIS or api in GRAPH_LAUNCH_APIS:
                self.launch_count += 1
                self.launch_us += dur
            correlation = args.get("correlation")
            if correlation is not None and (api in KERNEL_LAUNCH_APIS or api in GRAPH_LAUNCH_APIS
                                            or "Memcpy" in api or "Memset" in api):
                self.launches[correlation] = (ts, dur, self._intern(api), args.get("External id"))
            if api in SYNC_APIS:
                self.syncs.append((thread, ts, dur, self._intern(api)))
        elif category in ("cpu_op", "operator", "user_annotation"):
            if name.startswith("ProfilerStep#"):
                self.step_names.add(name)
                return
            name = self._intern(name)
            if category != "user_annotation":
                self.ops[thread].append((ts, end, name))
            if args.get("External id") is not None:
                self.op_names[args["External id"]] = name
        elif category == "python_function":
            match = _FRAME_NAME.match(name)
            where = frame_kind(match["file"]) if match else None
            if match and where:
                site = self._intern(f"{match['file']}:{match['line']} in {match['func']}")
                self.frames[thread].append((ts, end, site, where == "stdlib"))

    def _add_gpu(self, kind: str, name: str, ts: float, dur: float, event: dict, args: dict) -> None:
        device = args.get("device", event.get("pid"))
        self.gpu.append((ts, ts + dur, device, args.get("correlation"), args.get("External id"), kind))
        if kind == "k":
            stat = self.kernels.get(name)
            if stat is None:
                self.kernels[name] = [1, dur, dur]
            else:
                stat[0] += 1
                stat[1] += dur
                stat[2] = max(stat[2], dur)
            self.kernel_durations.append(dur)
        elif kind == "c":
            nbytes = _number(args.get("bytes")) or 0.0
            entry = self.memcpy.setdefault(copy_kind(name), {"count": 0, "bytes": 0, "us": 0.0, "small_count": 0})
            entry["count"] += 1
            entry["bytes"] += int(nbytes)
            entry["us"] += dur
            entry["small_count"] += 1 if nbytes < SMALL_COPY_BYTES else 0
        else:
            self.memset_count += 1
            self.memset_us += dur

    # ---- second look --------------------------------------------------------------
    def summary(self, steps: int) -> ProfileSummary:
        out = ProfileSummary(steps=steps if steps > 0 else len(self.step_names))
        if self.last > self.first:
            out.window_s = round((self.last - self.first) / 1e6, 6)
        self._kernel_stats(out)
        self._timeline(out)
        out.launch_count, out.launch_total_us = self.launch_count, round(self.launch_us, 3)
        out.top_ops = self._top_ops()
        out.memcpy = {k: {f: round(v, 3) for f, v in e.items()} for k, e in sorted(self.memcpy.items())}
        out.memset_count, out.memset_us = self.memset_count, round(self.memset_us, 3)
        self._sync_stats(out)
        if not self.gpu:
            out.error = ("no GPU activity in the trace: CUDA calls were recorded but no kernels or copies "
                         "(was ProfilerActivity.CUDA enabled?)" if self.launch_count or self.launches
                         else "no GPU activity in the trace: a CPU-only profile (no kernels, copies or CUDA calls)")
        return out

    def _kernel_stats(self, out: ProfileSummary) -> None:
        durations = self.kernel_durations
        out.kernel_count = len(durations)
        out.kernel_total_us = round(float(sum(durations)), 3)
        hist = {label: 0 for _, label in HIST_BUCKETS}
        for dur in durations:
            hist[next(label for bound, label in HIST_BUCKETS if dur < bound)] += 1
        out.kernel_duration_hist = hist
        out.kernel_median_us = round(statistics.median(durations), 3) if durations else None
        out.top_kernels = _top(((n, s[0], s[1], s[2]) for n, s in self.kernels.items()))
        for name, (count, total, _) in self.kernels.items():
            kind = classify_gemm(name)
            if kind is None:
                continue
            out.matmul_total_us += total
            if kind == "fp32":
                out.matmul_fp32_us += total
            elif kind == "tensor_core":
                out.matmul_tensor_core_us += total
            if "tf32" in name.lower():
                out.tf32_enabled = True  # a TF32 kernel ran, so TF32 was allowed
        for field in ("matmul_total_us", "matmul_fp32_us", "matmul_tensor_core_us"):
            setattr(out, field, round(getattr(out, field), 3))
        short = 0
        for start, end, _, correlation, _, kind in self.gpu:
            launch = self.launches.get(correlation) if kind == "k" and correlation is not None else None
            if launch and launch[2] in KERNEL_LAUNCH_APIS and launch[1] <= SHORT_LAUNCH_MAX_US \
                    and end - start < launch[1]:
                short += 1
        out.short_kernel_count = short

    def _timeline(self, out: ProfileSummary) -> None:
        by_device: dict[Any, list[tuple[float, float, Any]]] = defaultdict(list)
        for start, end, device, correlation, _, _ in self.gpu:
            by_device[str(device)].append((start, end, correlation))
        best: tuple[float, ...] | None = None
        for intervals in by_device.values():
            result = _busy_and_gaps(intervals, self._launch_time)
            if best is None or result[0] > best[0]:
                best = result
        if best is not None:
            busy, k2k, host, other = best
            out.gpu_busy_us = round(busy, 3)
            out.gpu_idle_us = round(k2k + host + other, 3)
            out.idle_gap_kernel_to_kernel_us = round(k2k, 3)
            out.idle_gap_host_wait_us = round(host, 3)
            out.idle_gap_other_us = round(other, 3)

    def _launch_time(self, correlation: Any) -> float | None:
        launch = self.launches.get(correlation) if correlation is not None else None
        return launch[0] if launch else None

    def _top_ops(self) -> list[KernelStat]:
        per_call: dict[Any, float] = defaultdict(float)
        for start, end, _, correlation, ext_id, _ in self.gpu:
            if ext_id not in self.op_names:
                launch = self.launches.get(correlation) if correlation is not None else None
                ext_id = launch[3] if launch else None
            if ext_id in self.op_names:
                per_call[ext_id] += end - start
        if per_call:
            grouped: dict[str, list[float]] = {}
            for ext_id, gpu_us in per_call.items():
                stat = grouped.setdefault(self.op_names[ext_id], [0, 0.0, 0.0])
                stat[0] += 1
                stat[1] += gpu_us
                stat[2] = max(stat[2], gpu_us)
            return _top((n, s[0], s[1], s[2]) for n, s in grouped.items())
        cpu: dict[str, list[float]] = {}
        for intervals in self.ops.values():
            for name, self_us in _self_times(intervals):
                stat = cpu.setdefault(name, [0, 0.0, 0.0])
                stat[0] += 1
                stat[1] += self_us
                stat[2] = max(stat[2], self_us)
        return _top((n, s[0], s[1], s[2]) for n, s in cpu.items())

    def _sync_stats(self, out: ProfileSummary) -> None:
        sites: dict[tuple[str, str | None], list[float]] = {}
        by_thread: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
        for thread, ts, dur, api in self.syncs:
            by_thread[thread].append((ts, dur, api))
        for thread, syncs in by_thread.items():
            syncs.sort()
            times = [ts for ts, _, _ in syncs]
            ops = _enclosing(self.ops.get(thread, []), times)
            frames = _enclosing(self.frames.get(thread, []), times)
            for (ts, dur, api), around, stack in zip(syncs, ops, frames):
                label = next((op[2] for op in around if op[2].startswith("aten::")), api)
                user = [f for f in stack if not f[3]] or stack
                stat = sites.setdefault((label, user[-1][2] if user else None), [0, 0.0])
                stat[0] += 1
                stat[1] += dur
        out.sync_count = len(self.syncs)
        out.sync_total_us = round(float(sum(s[2] for s in self.syncs)), 3)
        ranked = sorted(sites.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))[:TOP_N]
        out.sync_sites = [SyncSite(api=api, count=int(c), total_us=round(t, 3), site=site)
                          for (api, site), (c, t) in ranked]


def _top(rows: Iterable[tuple[str, float, float, float]]) -> list[KernelStat]:
    ranked = sorted(rows, key=lambda r: (-r[2], r[0]))[:TOP_N]
    return [KernelStat(name=_short(name), count=int(count), total_us=round(total, 3),
                       mean_us=round(total / count, 3) if count else 0.0, max_us=round(peak, 3))
            for name, count, total, peak in ranked]


def _short(name: str) -> str:
    return name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 3] + "..."


def _busy_and_gaps(intervals: list[tuple[float, float, Any]],
                   launch_time: Callable[[Any], float | None]) -> tuple[float, float, float, float]:
    """(busy, kernel-to-kernel, host-wait, other) microseconds over one device's GPU work."""
    intervals.sort(key=lambda i: (i[0], i[1]))
    busy = k2k = host = other = 0.0
    block_start, block_end = intervals[0][0], intervals[0][1]
    for start, end, correlation in intervals[1:]:
        if start <= block_end:
            block_end = max(block_end, end)
            continue
        busy += block_end - block_start
        gap = start - block_end
        launched = launch_time(correlation)
        if launched is not None and launched > block_end:
            host += gap  # the host queued this work only after the GPU ran dry
        elif gap < KERNEL_TO_KERNEL_GAP_US:
            k2k += gap
        elif launched is None:
            host += gap
        else:
            other += gap
        block_start, block_end = start, end
    busy += block_end - block_start
    return busy, k2k, host, other


def _enclosing(intervals: list[tuple], times: list[float]) -> list[list[tuple]]:
    """For each time (ascending), the intervals (start, end, ...) containing it, outermost first."""
    ordered = sorted(intervals, key=lambda i: (i[0], -i[1]))
    result: list[list[tuple]] = []
    stack: list[tuple] = []
    index = 0
    for t in times:
        while index < len(ordered) and ordered[index][0] <= t:
            item = ordered[index]
            while stack and stack[-1][1] < item[0]:
                stack.pop()
            stack.append(item)
            index += 1
        while stack and stack[-1][1] < t:
            stack.pop()
        result.append([i for i in stack if i[1] >= t])
    return result


def _self_times(intervals: list[tuple[float, float, str]]) -> Iterable[tuple[str, float]]:
    """(name, own time) of nested operators on one thread: duration minus their children's."""
    stack: list[list[Any]] = []  # [end, name, duration, children]
    for start, end, name in sorted(intervals, key=lambda i: (i[0], -i[1])):
        while stack and stack[-1][0] <= start:
            done = stack.pop()
            yield done[1], max(0.0, done[2] - done[3])
        if stack:
            stack[-1][3] += end - start
        stack.append([end, name, end - start, 0.0])
    while stack:
        done = stack.pop()
        yield done[1], max(0.0, done[2] - done[3])
