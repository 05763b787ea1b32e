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

Only statistics are kept. The fields read are taken out of the events once, as columns
(trace_columns), shared with the hotspots, and reduced with whole-array operations
(intervals) that add floats in the order a loop over the events would: the numbers are
those of the event-by-event walk this replaced, to the last bit.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gpudoctor.collectors.hotspots import add_hotspots
from gpudoctor.collectors.intervals import blocks, codes, grouped_sums, range_min, sequential_sum, tally
from gpudoctor.collectors.kineto_names import (  # noqa: F401  (public names re-exported)
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
from gpudoctor.collectors.trace_columns import TraceColumns, coded, str_codes
from gpudoctor.collectors.trace_decode import (
    GPU_COPY,
    GPU_KERNEL,
    GPU_SET,
    TraceIndex,
    gc_paused,
    id_list,
    id_rows,
    index_events,
    read_trace,
)
from gpudoctor.collectors.trace_file import (  # noqa: F401  (public names re-exported)
    MAX_TRACE_BYTES,
    TraceError,
    load_trace,
    trace_events,
)
from gpudoctor.collectors.trace_syncs import workload_syncs
from gpudoctor.collectors.window_picture import Gaps, gap_causes, idle_by_cause, picture, picture_range, thread_of
from gpudoctor.session import KernelStat, ProfileSummary, SyncSite

log = logging.getLogger(__name__)

KERNEL_TO_KERNEL_GAP_US = 30.0  # HTA: shorter gaps are the cost of launching back to back
SHORT_LAUNCH_MAX_US = 50.0  # HTA: longer launch calls are outliers, not short-kernel evidence
AGENT_FRAME = "gpudoctor/agent/"  # Python frames of gpudoctor's agent inside the workload
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


def summarize_trace(source: str | Path | Mapping[str, Any] | list[Any] | TraceIndex, steps: int = 0) -> ProfileSummary:
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
    add_hotspots(index, summary, columns=stats.columns)
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
    """The GPU events, CUDA calls and operators as columns (trace_columns), reduced to the
    summary by whole-array operations; the Python frames and operators around the
    synchronisations are kept for a second look."""

    def __init__(self) -> None:
        self.first, self.last = float("inf"), float("-inf")
        self.columns: TraceColumns | None = None
        # the operators that launched GPU work (first launch first) and the GPU us of each
        self.op_gpu: tuple[list[str], np.ndarray] = ([], np.zeros(0))
        self.cpu_self: list[tuple[str, list[float]]] = []

    def add(self, index: TraceIndex) -> None:
        self.first, self.last = index.first, index.last
        self.columns = TraceColumns(index)

    def add_context(self, index: TraceIndex) -> None:
        """Attribute GPU time to operators (their own CPU time when none launched GPU work)."""
        columns = self.columns
        assert columns is not None
        attributed, ext_ids, names = columns.gpu_operators
        kept = attributed >= 0
        if kept.any():
            gpu_us = grouped_sums(attributed[kept], columns.gpu_end[kept] - columns.gpu_start[kept], len(ext_ids))
            self.op_gpu = (names, gpu_us)
        if not self.op_gpu[0]:
            self.cpu_self = columns.own_times

    def summary(self, steps: int) -> ProfileSummary:
        columns = self.columns
        assert columns is not None
        out = ProfileSummary(steps=steps if steps > 0 else len(columns.step_names))
        if self.last > self.first:
            out.window_s = round((self.last - self.first) / 1e6, 6)
        self._kernel_stats(out)
        self._transfers(out)
        gaps = self._timeline(out)
        launches = np.array([k.launch for k in columns.api_kinds], dtype=bool)[columns.api_name_codes] \
            if len(columns.api_name_codes) else np.zeros(0, dtype=bool)
        out.launch_count = int(launches.sum())
        out.launch_total_us = round(sequential_sum(columns.api_dur[launches]), 3)
        if self.op_gpu[0]:
            name_codes, names = codes(self.op_gpu[0])
            counts, totals, peaks = tally(name_codes, self.op_gpu[1], len(names))
            out.top_ops = _top(zip(names, zip(counts.tolist(), totals.tolist(), peaks.tolist())))  # type: ignore[arg-type]
        else:
            out.top_ops = _top(self.cpu_self)
        after_sync = self._sync_stats(out, gaps)
        cause = gap_causes(columns, gaps, after_sync)
        out.idle_by_cause_us = idle_by_cause(gaps, cause)
        out.picture = picture(columns, gaps, cause, picture_range(columns.index), self._call_sites)
        kernels, (name_codes, names) = self.kernels
        is_comm = np.array([name.lower().startswith("nccl") for name in names], dtype=bool)
        comm_mask = is_comm[name_codes] if len(name_codes) else np.zeros(0, dtype=bool)
        if comm_mask.any():
            comm = _union_of(columns.gpu_start[kernels[comm_mask]], columns.gpu_end[kernels[comm_mask]])
            out.comm_kernel_count = int(comm_mask.sum())
            out.comm_us = round(sum(end - start for start, end in comm), 3)
            compute = kernels[~comm_mask]
            overlap = _overlap(comm, _union_of(columns.gpu_start[compute], columns.gpu_end[compute]))
            out.comm_overlap_us = round(overlap, 3)
        if not len(columns.gpu_kind):
            out.error = ("no GPU activity in the trace: CUDA calls were recorded but no kernels or copies "
                         "(was ProfilerActivity.CUDA enabled?)" if out.launch_count or len(columns.launch_calls)
                         else "no GPU activity in the trace: a CPU-only profile (no kernels, copies or CUDA calls)")
        return out

    @functools.cached_property
    def kernels(self) -> tuple[np.ndarray, tuple[np.ndarray, list[str]]]:
        """The positions of the kernels in index.gpu; a code per kernel for its name, the names."""
        columns = self.columns
        assert columns is not None
        kernels = np.flatnonzero(columns.gpu_kind == GPU_KERNEL)
        return kernels, coded(columns.index.gpu, "name", None if len(kernels) == len(columns.gpu_kind) else kernels)

    def _kernel_stats(self, out: ProfileSummary) -> None:
        columns = self.columns
        assert columns is not None
        kernels, (name_codes, names) = self.kernels
        durations = columns.gpu_dur[kernels]
        out.kernel_count = len(kernels)
        out.kernel_total_us = round(float(sum(durations.tolist())), 3)
        bounds = np.array([bound for bound, _ in HIST_BUCKETS])
        counts = np.bincount(np.searchsorted(bounds, durations, side="right"), minlength=len(HIST_BUCKETS))
        out.kernel_duration_hist = {label: int(n) for (_, label), n in zip(HIST_BUCKETS, counts.tolist())}
        if len(durations):
            ordered, middle = np.sort(durations).tolist(), len(durations) // 2
            median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
            out.kernel_median_us = round(median, 3)
        counts, totals, peaks = tally(name_codes, durations, len(names))
        rows = list(zip(names, zip(counts.tolist(), totals.tolist(), peaks.tolist())))
        out.top_kernels = _top(rows)  # type: ignore[arg-type]
        gemm = {"fp32": 0.0, "tensor_core": 0.0, "other": 0.0}
        for name, (_, total, _) in rows:
            kind = classify_gemm(name)
            if kind is not None:
                gemm[kind] += total
                if "tf32" in name.lower():
                    out.tf32_enabled = True  # a TF32 kernel ran, so TF32 was allowed
        out.matmul_fp32_us = round(gemm["fp32"], 3)
        out.matmul_tensor_core_us = round(gemm["tensor_core"], 3)
        out.matmul_total_us = round(sum(gemm.values()), 3)
        launch = columns.gpu_launch[kernels]
        queued = launch >= 0
        kernel_launch = np.array([k.kernel_launch for k in columns.api_kinds], dtype=bool)
        by_call = np.zeros(len(kernels), dtype=bool)
        if queued.any():
            calls = launch[queued]
            call_us = columns.api_dur[calls]
            gpu_us = columns.gpu_end[kernels[queued]] - columns.gpu_start[kernels[queued]]
            by_call[queued] = kernel_launch[columns.api_name_codes[calls]] & (gpu_us < call_us) \
                & (call_us <= SHORT_LAUNCH_MAX_US)
        out.short_kernel_count = int(by_call.sum())

    def _transfers(self, out: ProfileSummary) -> None:
        columns = self.columns
        assert columns is not None
        copies = np.flatnonzero(columns.gpu_kind == GPU_COPY)
        values = id_list(id_rows(columns.index.gpu.bytes, copies))
        memcpy = _copy_totals(columns, copies, values) if _plain_sizes(values) else None
        if memcpy is None:  # sizes of every kind (or none): one copy after the other
            memcpy = {}
            for i, value in zip(copies.tolist(), values):
                nbytes = _number(value) or 0.0
                entry = memcpy.setdefault(copy_kind(columns.gpu_names[i]),
                                          {"count": 0, "bytes": 0, "us": 0.0, "small_count": 0})
                entry["count"] += 1
                entry["bytes"] += int(nbytes)
                entry["us"] += float(columns.gpu_dur[i])
                entry["small_count"] += nbytes < SMALL_COPY_BYTES
        out.memcpy = {k: {f: round(v, 3) for f, v in e.items()} for k, e in sorted(memcpy.items())}
        memsets = columns.gpu_dur[columns.gpu_kind == GPU_SET]
        out.memset_count, out.memset_us = len(memsets), round(sequential_sum(memsets), 3)

    def _timeline(self, out: ProfileSummary) -> Gaps:
        """Busy/idle of the busiest device into `out`; its idle gaps."""
        columns = self.columns
        assert columns is not None
        device_codes, devices = str_codes(columns.index.gpu.resolved("device", "pid"))
        best: tuple[list[float], Gaps] | None = None
        best_device = -1
        for device in range(len(devices)):
            mine = np.flatnonzero(device_codes == device) if len(devices) > 1 else np.arange(len(device_codes))
            totals, gaps = self._busy_and_gaps(mine)
            if best is None or totals[0] > best[0][0]:
                best, best_device = (totals, gaps), device
        if best is None:
            empty = np.zeros(0, dtype=np.int64)
            return Gaps(np.zeros(0), np.zeros(0), empty, empty, empty, empty)
        (busy, k2k, host, other), gaps = best
        out.streams = self._streams(np.flatnonzero(device_codes == best_device), busy + k2k + host + other)
        out.gpu_busy_us, out.gpu_idle_us = round(busy, 3), round(k2k + host + other, 3)
        out.idle_gap_kernel_to_kernel_us, out.idle_gap_host_wait_us = round(k2k, 3), round(host, 3)
        out.idle_gap_other_us = round(other, 3)
        return gaps

    def _streams(self, mine: np.ndarray, span: float) -> list[dict[str, Any]]:
        """Busy time per stream of one device (the union of each stream's own work), busiest
        first; its share of the device's span (first start to last end, as busy + idle)."""
        columns = self.columns
        assert columns is not None
        values = columns.index.gpu.resolved("stream", "tid")
        stream_codes, streams = str_codes(values if len(mine) == len(values) else [values[i] for i in mine.tolist()])
        rows = []
        for code, stream in enumerate(streams):
            own = mine[stream_codes == code]
            starts, ends = columns.gpu_start[own], columns.gpu_end[own]
            order = np.lexsort((ends, starts))
            block_starts, block_ends, _ = blocks(starts[order], ends[order])
            busy = sequential_sum(block_ends - block_starts)
            rows.append({"stream": stream, "ops": len(own), "busy_us": round(busy, 3),
                         "busy_share": round(busy / span, 4) if span > 0 else None})
        return sorted(rows, key=lambda r: (-r["busy_us"], r["stream"]))

    def _busy_and_gaps(self, mine: np.ndarray) -> tuple[list[float], Gaps]:
        """([busy, kernel-to-kernel, host wait, other] us, its idle gaps) on one device."""
        columns = self.columns
        assert columns is not None
        starts, ends = columns.gpu_start[mine], columns.gpu_end[mine]
        order = np.lexsort((ends, starts))  # stable: file order on ties
        block_starts, block_ends, opening = blocks(starts[order], ends[order])
        busy = sequential_sum(block_ends - block_starts)
        gap_starts, gap_ends = block_ends[:-1], block_starts[1:]
        gap = gap_ends - gap_starts
        next_op = mine[order[opening[1:]]]
        launch = columns.gpu_launch[next_op]
        queued = launch >= 0
        late = np.zeros(len(gap), dtype=bool)
        late[queued] = columns.api_start[launch[queued]] > gap_starts[queued]
        # 1 kernel-to-kernel, 2 host wait, 3 other (a dependency)
        kind = np.where(late, 2, np.where(gap < KERNEL_TO_KERNEL_GAP_US, 1, np.where(queued, 3, 2)))
        sums = grouped_sums(kind, gap, 4).tolist()
        return [busy, sums[1], sums[2], sums[3]], Gaps(gap_starts, gap_ends, kind, launch, next_op, mine)

    def _call_sites(self, calls: list[int]) -> list[str | None]:
        """The Python call site (innermost user frame) of each CUDA call, by position in index.api."""
        columns = self.columns
        assert columns is not None
        by_thread: dict[Any, list[int]] = defaultdict(list)
        for position in calls:
            by_thread[thread_of(columns, position)].append(position)
        named: dict[int, str | None] = {}
        frames = columns.frames
        for thread, positions in by_thread.items():
            positions.sort(key=lambda p: float(columns.api_start[p]))
            times = columns.api_start[np.array(positions, dtype=np.int64)]
            mine = frames.on(thread)
            # only the frames around one of the calls (a few per call, of a million frames)
            after = np.searchsorted(times, frames.start[mine], side="left")
            mine = mine[(after < len(times)) & (times[np.minimum(after, len(times) - 1)] <= frames.end[mine])]
            names = [frames.distinct_names[code] for code in frames.name_codes[mine].tolist()]
            spans = list(zip(frames.start[mine].tolist(), frames.end[mine].tolist(), names))
            around = _enclosing(spans, times.tolist())
            for position, enclosing in zip(positions, around):
                named[position] = _site([frame[2] for frame in enclosing])
        return [named.get(position) for position in calls]

    def _sync_stats(self, out: ProfileSummary, gaps: Gaps) -> np.ndarray:
        assert self.columns is not None
        syncs = workload_syncs(self.columns, _site)
        out.sync_count = len(syncs.dur)
        out.sync_total_us = round(float(sum(syncs.dur)), 3)
        ranked = sorted(syncs.sites.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))[:TOP_N]
        out.sync_sites = [SyncSite(api=api, count=int(c), total_us=round(t, 3), site=site)
                          for (api, site), (c, t) in ranked]
        # a gap follows a sync when the GPU ran dry during the sync and the host resumed
        # inside the gap: the sync emptied the queue and the host had to refill it
        gap_starts, gap_ends = gaps.starts, gaps.ends
        after_sync = np.zeros(len(gap_starts), dtype=bool)
        if syncs.dur and len(gap_starts):
            sync_starts = syncs.start
            sync_ends = sync_starts + np.array(syncs.dur, dtype=np.float64)
            order = np.argsort(sync_ends, kind="stable")
            sync_starts, sync_ends = sync_starts[order], sync_ends[order]
            # the syncs that ended around the gap: did one of them start before it?
            low = np.searchsorted(sync_ends, gap_starts - SYNC_SLACK_US, side="left")
            high = np.searchsorted(sync_ends, gap_ends + SYNC_SLACK_US, side="right")
            after_sync = range_min(sync_starts, low, high) <= gap_starts + SYNC_SLACK_US
            out.idle_after_sync_us = round(sequential_sum((gap_ends - gap_starts)[after_sync]), 3)
        return after_sync


def _site(frames: list[str] | tuple[str, ...]) -> str | None:
    """'func (file:line) -> callee' for the innermost user frame of a stack (outermost first)."""
    return _site_of(tuple(frames))


def _plain_sizes(values: list[Any]) -> bool:
    """Copy sizes that are all plain ints or floats, finite and small enough that a float holds
    them whole (a real trace's): added as arrays; any other, one by one."""
    if not set(map(type, values)) <= {int, float, type(None)}:
        return False
    try:
        sizes = _sizes(values)
    except OverflowError:
        return False
    return bool(np.isfinite(sizes).all() and (np.abs(sizes) < 2.0 ** 52).all() and np.abs(sizes).sum() < 2.0 ** 62)


def _sizes(values: list[Any]) -> np.ndarray:
    """The sizes as floats (_number: None, no size, counts as 0)."""
    if None in values:
        values = [0.0 if v is None else v for v in values]
    return np.array(values, dtype=np.float64)


def _copy_totals(columns: TraceColumns, copies: np.ndarray, values: list[Any]) -> dict[str, dict[str, float]]:
    """Per copy kind: count, bytes (each copy's size as a whole number), us (added in file order)
    and the copies under SMALL_COPY_BYTES."""
    name_codes, names = coded(columns.index.gpu, "name", copies)
    kind_codes, kinds = codes([copy_kind(name) for name in names])
    kind_of = kind_codes[name_codes] if len(name_codes) else name_codes
    sizes = _sizes(values)
    counts = np.bincount(kind_of, minlength=len(kinds)).tolist()
    us = grouped_sums(kind_of, columns.gpu_dur[copies], len(kinds)).tolist()
    small = np.bincount(kind_of, weights=sizes < SMALL_COPY_BYTES, minlength=len(kinds)).astype(np.int64).tolist()
    whole = sizes.astype(np.int64)  # int() of each size: toward zero
    totals = [int(whole[kind_of == k].sum()) for k in range(len(kinds))]
    return {kind: {"count": counts[k], "bytes": totals[k], "us": us[k], "small_count": small[k]}
            for k, kind in enumerate(kinds)}


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


def _enclosing(intervals: list[tuple[Any, ...]], times: list[float]) -> list[list[tuple[Any, ...]]]:
    """For each time (ascending), the intervals (start, end, ...) containing it, outermost first."""
    ordered = sorted(intervals, key=lambda i: (i[0], -i[1]))
    result: list[list[tuple[Any, ...]]] = []
    stack: list[tuple[Any, ...]] = []
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


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint intervals covering the same time."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _union_of(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """_union of the intervals (starts[i], ends[i])."""
    order = np.lexsort((ends, starts))
    block_starts, block_ends, _ = blocks(starts[order], ends[order])
    return list(zip(block_starts.tolist(), block_ends.tolist()))


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
