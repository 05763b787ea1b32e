"""Compact statistics of a torch.profiler (kineto) Chrome trace: a ProfileSummary.

The input is what ``prof.export_chrome_trace(path)`` writes (JSON, or gzip-compressed):
a ``traceEvents`` list of complete events (``ph: "X"``, ``ts``/``dur`` in us). Used here:
``kernel``, ``gpu_memcpy``, ``gpu_memset`` (GPU side, one ``tid`` per stream),
``cuda_runtime``/``cuda_driver`` (host CUDA calls), ``cpu_op``/``user_annotation``
(operators, ``record_function`` ranges) and ``python_function`` (``with_stack=True``).
A GPU event and the call that queued it share ``args.correlation`` (the ``ac2g`` flow
arrows); a GPU event and the operator that launched it share ``args["External id"]``.

Definitions, after Holistic Trace Analysis (HTA) where it has one:

- GPU busy: the union of kernel, memcpy and memset intervals on all streams of the
  busiest device, between its first start and last end; idle is the rest.
- Idle gaps: *host wait* when the call that queued the next GPU work started after the
  GPU ran dry; *kernel-to-kernel* when it was queued in time and the gap is under 30 us;
  *other* when queued in time and longer (a dependency). Without a launch record a gap
  is classified by length alone. *After sync*: gaps that began while the host was
  blocked in a synchronisation.
- Short kernel: GPU time below the CPU time of its own launch call, that call at most
  50 us long.
- Top operators: GPU time of the work each operator launched; when nothing can be
  attributed (CPU-only traces), the operators' own (self) CPU time.
- Host synchronisations: blocking CUDA calls, named after the outermost ATen operator
  around them (``aten::item`` for ``.item()``) and placed at the innermost Python
  function around them that is neither torch, an installed package nor the standard
  library, with the call it made (``train_step (train.py:12) -> Tensor.item``). torch
  records a function's ``def`` line for calls made inside the window.

Only statistics are kept: the events are read twice (the second time only for the
Python frames and operators around synchronisations) and dropped.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
import statistics
from array import array
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpudoctor.collectors.hotspots import add_hotspots
from gpudoctor.collectors.kineto_names import (  # public names re-exported
    _FRAME_NAME,
    _VERSION_SUFFIX,
    GRAPH_LAUNCH_APIS,
    KERNEL_LAUNCH_APIS,
    SYNC_APIS,
    callee_name,
    classify_gemm,
    copy_kind,
    frame_kind,
)
from gpudoctor.collectors.trace_decode import (
    GPU_KINDS,
    OP,
    TraceIndex,
    gc_paused,
    index_events,
    read_trace,
)
from gpudoctor.collectors.trace_file import (  # noqa: F401  (public names re-exported)
    MAX_TRACE_BYTES,
    TraceError,
    load_trace,
    trace_events,
)
from gpudoctor.session import KernelStat, ProfileSummary, SyncSite

log = logging.getLogger(__name__)

KERNEL_TO_KERNEL_GAP_US = 30.0  # HTA: shorter gaps are the cost of launching back to back
SHORT_LAUNCH_MAX_US = 50.0  # HTA: longer launch calls are outliers, not short-kernel evidence
AGENT_FRAME = "gpudoctor/agent/"  # Python frames of gpudoctor's agent inside the workload
# gpudoctor opening or closing its own window: its syncs are not the workload's (its wrappers
# around the DataLoader, the fetchers and the safe points are transparent: the work inside is)
AGENT_WINDOW_FRAME = "gpudoctor/agent/profiler"
SMALL_COPY_BYTES = 64 * 1024  # Nsight Systems ignores synchronous H2D copies below this size
SYNC_SLACK_US = 10.0  # host and GPU clocks agree to a few us only
TOP_N = 10
MAX_NAME_CHARS = 300  # C++ template kernel names run to kilobytes
HIST_BUCKETS: tuple[tuple[float, str], ...] = (
    (2.0, "<2us"), (5.0, "2-5us"), (10.0, "5-10us"), (20.0, "10-20us"), (50.0, "20-50us"),
    (100.0, "50-100us"), (1000.0, "100us-1ms"), (10000.0, "1-10ms"), (float("inf"), ">10ms"))

_GPU_CATEGORIES = {"kernel": "k", "gpu_memcpy": "c", "memcpy": "c", "gpu_memset": "s", "memset": "s"}
_API_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
_OP_CATEGORIES = frozenset({"cpu_op", "operator", "user_annotation"})


def summarize_trace(source: str | Path | Mapping[str, Any] | list | TraceIndex, steps: int = 0) -> ProfileSummary:
    """Statistics of one profiler trace: a path (JSON or .json.gz), already-loaded data or
    a TraceIndex (trace_decode.read_trace).

    `steps` is the number of steps the trace covers; 0 counts its ``ProfilerStep#N``
    ranges. Raises TraceError for unreadable input. A trace without GPU activity is no
    error: it gives ``kernel_count == 0`` and says why in ``error``.
    """
    index = read_trace(source) if isinstance(source, (str, Path)) else index_events(source)
    with gc_paused():
        return _summarize(index, steps)


def _summarize(index: TraceIndex, steps: int) -> ProfileSummary:
    if index.events == 0:
        raise TraceError("the trace holds no complete (ph 'X') events"
                         + (f" ({index.malformed} malformed)" if index.malformed else ""))
    if index.malformed:
        log.debug("skipped %d malformed trace events", index.malformed)
    stats = _TraceStats()
    stats.add(index)
    stats.add_context(index)
    summary = stats.summary(steps)
    add_hotspots(index, summary)
    return summary


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _times(event: Any) -> tuple[float, float] | None:
    """(ts, dur) of a well-formed complete event (a dict), else None."""
    if not isinstance(event, dict) or event.get("ph") != "X":
        return None
    ts, dur = _number(event.get("ts")), _number(event.get("dur"))
    return (ts, dur) if ts is not None and dur is not None and dur >= 0 else None


class _TraceStats:
    """One walk of the indexed GPU events, CUDA calls and operators keeps compact tuples of
    what needs a second look; the second, only what surrounds the synchronisations (and
    all operators when CPU time must stand in)."""

    def __init__(self) -> None:
        self.first, self.last = float("inf"), float("-inf")
        self.kernels: dict[str, list[float]] = {}  # name -> [count, total us, max us]
        self.durations = array("d")
        self.gpu: list[tuple[float, float, Any, Any, Any, str]] = []  # start, end, device, corr, ext id, kind
        self.gpu_streams: list[Any] = []  # the stream of each in self.gpu
        self.memcpy: dict[str, dict[str, float]] = {}
        self.memset_count, self.memset_us = 0, 0.0
        self.launches: dict[Any, tuple[float, float, str, Any]] = {}  # corr -> ts, dur, api, ext id
        self.launch_count, self.launch_us = 0, 0.0
        self.syncs: list[tuple[Any, float, float, str]] = []  # thread, ts, dur, api
        self.op_names: dict[Any, str] = {}  # External id -> operator
        self.step_names: set[str] = set()
        self.around: dict[Any, list[tuple[float, float, bool, str]]] = defaultdict(list)  # ts, end, frame?, name
        self.op_gpu: dict[Any, float] = defaultdict(float)  # External id -> GPU us it launched
        self.cpu_self: dict[str, list[float]] = {}
        self._names: dict[str, str] = {}
        # kernel intervals: collectives (nccl*, ncclDevKernel_*) and everything else
        self.comm: list[tuple[float, float]] = []
        self.compute: list[tuple[float, float]] = []

    def _intern(self, name: str) -> str:
        return self._names.setdefault(name, name)

    def add(self, index: TraceIndex) -> None:
        self.first, self.last = index.first, index.last
        for event in index.gpu:
            self.gpu_streams.append(event.stream)
            args = event.args
            self._add_gpu(GPU_KINDS[event.kind], event.name, event.ts, event.dur, event.device,  # type: ignore[arg-type]
                          args.correlation if args is not None else None,
                          args.external_id if args is not None else None, args.bytes if args is not None else None)
        apis: dict[str, tuple[str, bool, bool, bool]] = {}  # name -> api, launches?, tracked?, sync?
        launches, syncs = self.launches, self.syncs
        for event in index.api:
            name = event.name
            known = apis.get(name)  # type: ignore[arg-type]
            if known is None:
                api = self._intern(_VERSION_SUFFIX.sub("", name))  # type: ignore[arg-type]
                launch = api in KERNEL_LAUNCH_APIS or api in GRAPH_LAUNCH_APIS
                known = apis[name] = (api, launch, launch or "Memcpy" in api or "Memset" in api,  # type: ignore[index]
                                      api in SYNC_APIS)
            api, launch, tracked, sync = known
            if launch:
                self.launch_count += 1
                self.launch_us += event.dur  # type: ignore[operator]
            args = event.args
            if tracked and args is not None and args.correlation is not None:
                launches[args.correlation] = (event.ts, event.dur, api, args.external_id)  # type: ignore[assignment]
            if sync:
                syncs.append(((event.pid, event.tid), event.ts, event.dur, api))  # type: ignore[arg-type]
        op_names, step_names, intern = self.op_names, self.step_names, self._intern
        for event in index.ops:
            name = event.name
            if name.startswith("ProfilerStep#"):  # type: ignore[union-attr]
                step_names.add(name)  # type: ignore[arg-type]
            elif event.args is not None and event.args.external_id is not None:
                op_names[event.args.external_id] = intern(name)  # type: ignore[arg-type]

    def _add_gpu(self, kind: str, name: str, ts: float, dur: float, device: Any, correlation: Any, ext_id: Any,
                 nbytes_arg: Any) -> None:
        self.gpu.append((ts, ts + dur, device, correlation, ext_id, kind))
        if kind == "k":
            (self.comm if name.lower().startswith("nccl") else self.compute).append((ts, ts + dur))
            _tally(self.kernels, name, dur)
            self.durations.append(dur)
        elif kind == "c":
            nbytes = _number(nbytes_arg) or 0.0
            entry = self.memcpy.setdefault(copy_kind(name), {"count": 0, "bytes": 0, "us": 0.0, "small_count": 0})
            entry["count"] += 1
            entry["bytes"] += int(nbytes)
            entry["us"] += dur
            entry["small_count"] += nbytes < SMALL_COPY_BYTES
        else:
            self.memset_count += 1
            self.memset_us += dur

    def add_context(self, index: TraceIndex) -> None:
        """Pass two: attribute GPU time to operators; keep the frames and operators around syncs."""
        for start, end, _, correlation, ext_id, _ in self.gpu:
            if ext_id not in self.op_names:
                launch = self.launches.get(correlation) if correlation is not None else None
                ext_id = launch[3] if launch else None
            if ext_id in self.op_names:
                self.op_gpu[ext_id] += end - start
        sync_times: dict[Any, list[float]] = defaultdict(list)
        for thread, ts, _, _ in self.syncs:
            sync_times[thread].append(ts)
        for times in sync_times.values():
            times.sort()
        cpu_ops: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
        need_cpu = not self.op_gpu
        if not need_cpu and not sync_times:
            return
        for events, frame in ((index.ops, False), (index.frames, True)):
            for event in events:
                if event.kind != OP and not frame:
                    continue  # record_function ranges: neither operators nor frames
                start, thread = event.ts, (event.pid, event.tid)  # type: ignore[assignment]
                end = start + event.dur  # type: ignore[operator]
                if need_cpu and not frame:
                    cpu_ops[thread].append((start, end, self._intern(event.name)))  # type: ignore[arg-type]
                at = sync_times.get(thread)
                if at:
                    i = bisect.bisect_left(at, start)
                    if i < len(at) and at[i] <= end:
                        self.around[thread].append((start, end, frame, self._intern(event.name)))  # type: ignore[arg-type]
        for intervals in cpu_ops.values():
            for name, own in _self_times(intervals):
                _tally(self.cpu_self, name, own)

    def summary(self, steps: int) -> ProfileSummary:
        out = ProfileSummary(steps=steps if steps > 0 else len(self.step_names))
        if self.last > self.first:
            out.window_s = round((self.last - self.first) / 1e6, 6)
        self._kernel_stats(out)
        gaps = self._timeline(out)
        out.launch_count, out.launch_total_us = self.launch_count, round(self.launch_us, 3)
        grouped: dict[str, list[float]] = {}
        for ext_id, gpu_us in self.op_gpu.items():
            _tally(grouped, self.op_names[ext_id], gpu_us)
        out.top_ops = _top(grouped.items() if grouped else self.cpu_self.items())
        out.memcpy = {k: {f: round(v, 3) for f, v in e.items()} for k, e in sorted(self.memcpy.items())}
        out.memset_count, out.memset_us = self.memset_count, round(self.memset_us, 3)
        self._sync_stats(out, gaps)
        if self.comm:
            comm = _union(self.comm)
            out.comm_kernel_count = len(self.comm)
            out.comm_us = round(sum(end - start for start, end in comm), 3)
            out.comm_overlap_us = round(_overlap(comm, _union(self.compute)), 3)
        if not self.gpu:
            out.error = ("no GPU activity in the trace: CUDA calls were recorded but no kernels or copies "
                         "(was ProfilerActivity.CUDA enabled?)" if self.launch_count or self.launches
                         else "no GPU activity in the trace: a CPU-only profile (no kernels, copies or CUDA calls)")
        return out

    def _kernel_stats(self, out: ProfileSummary) -> None:
        out.kernel_count = len(self.durations)
        out.kernel_total_us = round(float(sum(self.durations)), 3)
        hist = {label: 0 for _, label in HIST_BUCKETS}
        for dur in self.durations:
            hist[next(label for bound, label in HIST_BUCKETS if dur < bound)] += 1
        out.kernel_duration_hist = hist
        out.kernel_median_us = round(statistics.median(self.durations), 3) if self.durations else None
        out.top_kernels = _top(self.kernels.items())
        totals = {"fp32": 0.0, "tensor_core": 0.0, "other": 0.0}
        for name, (_, total, _) in self.kernels.items():
            kind = classify_gemm(name)
            if kind is not None:
                totals[kind] += total
                if "tf32" in name.lower():
                    out.tf32_enabled = True  # a TF32 kernel ran, so TF32 was allowed
        out.matmul_fp32_us = round(totals["fp32"], 3)
        out.matmul_tensor_core_us = round(totals["tensor_core"], 3)
        out.matmul_total_us = round(sum(totals.values()), 3)
        for start, end, _, correlation, _, kind in self.gpu:
            launch = self.launches.get(correlation) if kind == "k" and correlation is not None else None
            if launch and launch[2] in KERNEL_LAUNCH_APIS and end - start < launch[1] <= SHORT_LAUNCH_MAX_US:
                out.short_kernel_count += 1

    def _timeline(self, out: ProfileSummary) -> list[float]:
        """Busy/idle of the busiest device into `out`; the start times of its idle gaps."""
        by_device: dict[str, list[tuple[float, float, Any]]] = defaultdict(list)
        for start, end, device, correlation, _, _ in self.gpu:
            by_device[str(device)].append((start, end, correlation))
        best: tuple[list[float], list[float]] | None = None
        best_device = ""
        for device, intervals in by_device.items():
            totals, gaps = self._busy_and_gaps(intervals)
            if best is None or totals[0] > best[0][0]:
                best, best_device = (totals, gaps), device
        if best is None:
            return []
        (busy, k2k, host, other), gaps = best
        out.streams = self._streams(best_device, busy + k2k + host + other)
        out.gpu_busy_us, out.gpu_idle_us = round(busy, 3), round(k2k + host + other, 3)
        out.idle_gap_kernel_to_kernel_us, out.idle_gap_host_wait_us = round(k2k, 3), round(host, 3)
        out.idle_gap_other_us = round(other, 3)
        return gaps

    def _streams(self, device: str, span: float) -> list[dict[str, Any]]:
        """Busy time per stream of one device (the union of each stream's own work), busiest
        first; its share of the device's span (first start to last end, as busy + idle)."""
        by_stream: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for (start, end, gpu_device, _, _, _), stream in zip(self.gpu, self.gpu_streams):
            if str(gpu_device) == device:
                by_stream[str(stream)].append((start, end))
        rows = []
        for stream, intervals in by_stream.items():
            intervals.sort()
            busy, block_start, block_end = 0.0, intervals[0][0], intervals[0][1]
            for start, end in intervals[1:]:
                if start > block_end:
                    busy += block_end - block_start
                    block_start = start
                block_end = max(block_end, end)
            busy += block_end - block_start
            rows.append({"stream": stream, "ops": len(intervals), "busy_us": round(busy, 3),
                         "busy_share": round(busy / span, 4) if span > 0 else None})
        return sorted(rows, key=lambda r: (-r["busy_us"], r["stream"]))

    def _busy_and_gaps(self, intervals: list[tuple[float, float, Any]]) -> tuple[list[float], list[float]]:
        """([busy, kernel-to-kernel, host wait, other] us, [gap start, gap end, ...]) on one device."""
        intervals.sort(key=lambda i: (i[0], i[1]))
        totals, gaps = [0.0, 0.0, 0.0, 0.0], []
        block_start, block_end = intervals[0][0], intervals[0][1]
        for start, end, correlation in intervals[1:]:
            if start <= block_end:
                block_end = max(block_end, end)
                continue
            totals[0] += block_end - block_start
            gap, launch = start - block_end, self.launches.get(correlation) if correlation is not None else None
            if launch is not None and launch[0] > block_end:
                totals[2] += gap  # the host queued this work only after the GPU ran dry
            else:
                totals[1 if gap < KERNEL_TO_KERNEL_GAP_US else 2 if launch is None else 3] += gap
            gaps += [block_end, start]
            block_start, block_end = start, end
        totals[0] += block_end - block_start
        return totals, gaps

    def _sync_stats(self, out: ProfileSummary, gaps: list[float]) -> None:
        by_thread: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
        for thread, ts, dur, api in self.syncs:
            by_thread[thread].append((ts, dur, api))
        sites: dict[tuple[str, str | None], list[float]] = {}
        kept: list[tuple[Any, float, float, str]] = []
        for thread, syncs in by_thread.items():
            syncs.sort()
            around = _enclosing(self.around.get(thread, []), [ts for ts, _, _ in syncs])
            for (ts, dur, api), enclosing in zip(syncs, around):
                frames = [i[3] for i in enclosing if i[2]]
                if any(AGENT_WINDOW_FRAME in frame.replace("\\", "/") for frame in frames):
                    continue  # gpudoctor's own (closing the profiler window), not the workload's
                kept.append((thread, ts, dur, api))
                label = next((i[3] for i in enclosing if not i[2] and i[3].startswith("aten::")), api)
                stat = sites.setdefault((label, _site(frames)), [0, 0.0])
                stat[0] += 1
                stat[1] += dur
        self.syncs = kept
        out.sync_count = len(self.syncs)
        out.sync_total_us = round(float(sum(s[2] for s in self.syncs)), 3)
        ranked = sorted(sites.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))[:TOP_N]
        out.sync_sites = [SyncSite(api=api, count=int(c), total_us=round(t, 3), site=site)
                          for (api, site), (c, t) in ranked]
        # a gap follows a sync when the GPU ran dry during the sync and the host resumed
        # inside the gap: the sync emptied the queue and the host had to refill it
        blocked = sorted((ts + dur, ts) for _, ts, dur, _ in self.syncs)
        ends = [b[0] for b in blocked]
        for gap_start, gap_end in zip(gaps[::2], gaps[1::2]):
            i = bisect.bisect_left(ends, gap_start - SYNC_SLACK_US)
            while i < len(blocked) and blocked[i][0] <= gap_end + SYNC_SLACK_US:
                if blocked[i][1] <= gap_start + SYNC_SLACK_US:
                    out.idle_after_sync_us += gap_end - gap_start
                    break
                i += 1
        out.idle_after_sync_us = round(out.idle_after_sync_us, 3)


def _site(frames: list[str] | tuple[str, ...]) -> str | None:
    """'func (file:line) -> callee' for the innermost user frame of a stack (outermost first)."""
    return _site_of(tuple(frames))


@functools.lru_cache(maxsize=1 << 14)  # the same stacks recur every step
def _site_of(frames: tuple[str, ...]) -> str | None:
    kinds = [(i, frame_kind(m["file"]), m) for i, m in enumerate(_FRAME_NAME.match(f) for f in frames) if m]
    user = [k for k in kinds if k[1] == "user"] or [k for k in kinds if k[1] == "stdlib"]
    if not user:
        return None
    index, _, match = user[-1]
    callee = f" -> {callee_name(frames[index + 1])}" if index + 1 < len(frames) else ""
    return f"{match['func']} ({match['file']}:{match['line']}){callee}"


def _tally(table: dict[str, list[float]], key: str, value: float) -> None:
    """[count, total, max] per key."""
    stat = table.setdefault(key, [0, 0.0, 0.0])
    stat[0] += 1
    stat[1] += value
    stat[2] = max(stat[2], value)


def _top(rows: Iterable[tuple[str, list[float]]]) -> list[KernelStat]:
    ranked = sorted(rows, key=lambda r: (-r[1][1], r[0]))[:TOP_N]
    return [KernelStat(name=name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 3] + "...",
                       count=int(count), total_us=round(total, 3),
                       mean_us=round(total / count, 3) if count else 0.0, max_us=round(peak, 3))
            for name, (count, total, peak) in ranked]


def _enclosing(intervals: list[tuple], times: list[float]) -> list[list[tuple]]:
    """For each time (ascending), the intervals (start, end, ...) containing it, outermost first."""
    ordered = sorted(intervals, key=lambda i: (i[0], -i[1]))
    result: list[list[tuple]] = []
    stack: list[tuple] = []
    index = 0
    for t in times:
        while index < len(ordered) and ordered[index][0] <= t:
            while stack and stack[-1][1] < ordered[index][0]:
                stack.pop()
            stack.append(ordered[index])
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


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint intervals covering the same time."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Time covered by both of two disjoint, sorted interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if high > low:
            total += high - low
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
