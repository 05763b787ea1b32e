"""What travels between the sweep (parent) and one trial (a child process): plain data.

A trial receives a `TrialSpec` as JSON and answers with a `TrialResult` as JSON. Both
sides only ever add fields, so an older result file still loads. "Not measured" is None
together with a reason in `unavailable`, never zero.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

MODES = ("infer", "train")
DTYPES = ("float32", "bfloat16", "float16")

# Trial outcomes. `ok` is the only one with measurements; `oom` and `over_budget` are
# expected search results, the others are failures of the target or of the process.
OK = "ok"
OOM = "oom"
CUDA_ERROR = "cuda_error"  # sticky: the CUDA context is unusable, never retried
ERROR = "error"  # the target raised (maybe only at this size)
BAD_TARGET = "bad_target"  # the target cannot be used at all (bad input)
CRASHED = "crashed"  # the trial process died without an answer
TIMEOUT = "timeout"
SKIPPED = "skipped"  # not run (larger than a size that ran out of memory, ...)
STATUSES = (OK, OOM, CUDA_ERROR, ERROR, BAD_TARGET, CRASHED, TIMEOUT, SKIPPED)


@dataclass(frozen=True)
class TrialSpec:
    """One batch size to measure, and how. Defaults are the documented stability rule."""

    target: str  # "path/to/file.py:build" or "package.module:build"
    mode: str  # infer | train
    batch_size: int
    input_shape: tuple[int, ...] | None = None  # for a plain nn.Module target
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "float32"  # anything else runs under torch.autocast
    compile: bool = False
    warmup_min_iters: int = 2  # then until the step times stop falling (gpudoctor.sweep.measure)
    warmup_min_s: float = 0.2
    warmup_max_s: float = 120.0  # torch.compile of a big model can take a minute
    min_iters: int = 20
    min_time_s: float | None = None  # None: 1.0 s on GPU, 0.5 s on CPU
    max_time_s: float = 10.0
    max_iters: int = 100_000
    rel_ci_target: float = 0.05  # half-width of the median's 95% CI, relative
    drift_target: float = 0.05  # first-half vs second-half median, relative
    tail_target: float = 2.0  # p90 / median: above it a size is not stable
    sample_gpu: bool = True
    # > 0: a fit check, run only to learn whether the size fits: this many steps (the first
    # included), each synchronised, to the peak memory; no warm-up rule, no timed window
    fit_check_steps: int = 0
    # a fit check's cuDNN autotuning: None leaves torch.backends.cudnn.benchmark as the
    # target set it; False turns it off for the check only (restored afterwards)
    fit_check_cudnn_benchmark: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["input_shape"] = list(self.input_shape) if self.input_shape else None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("input_shape") is not None:
            values["input_shape"] = tuple(int(x) for x in values["input_shape"])
        return cls(**values)


@dataclass
class Timing:
    """Per-iteration times of the timed window (after warm-up)."""

    timer: str  # cuda_events | perf_counter
    iterations: int
    measured_s: float  # sum of the timed iterations
    wall_s: float  # host wall clock of the timed window, syncs and bookkeeping included
    warmup_iterations: int
    warmup_s: float
    step_time_mean_s: float
    step_time_median_s: float
    latency_p50_s: float
    latency_p90_s: float
    latency_p99_s: float
    samples_per_s: float  # batch_size * iterations / measured_s
    stable: bool
    rel_ci_half_width: float | None  # of the median; None below 6 iterations
    drift: float | None  # |median(2nd half) / median(1st half) - 1|
    stop_reason: str  # why the timed loop ended, in words
    warmup_stop_reason: str | None = None  # why the warm-up ended: step times settled, or its cap


@dataclass
class Memory:
    capacity_bytes: int | None = None  # device total (GPU) or machine RAM (CPU)
    free_at_start_bytes: int | None = None  # other processes may hold some of the device
    model_bytes: int | None = None  # allocated after the model (and optimizer) moved in
    peak_allocated_bytes: int | None = None  # torch.cuda.max_memory_allocated
    peak_reserved_bytes: int | None = None  # torch.cuda.max_memory_reserved
    peak_rss_bytes: int | None = None  # the trial process's peak resident set (CPU runs)
    alloc_retries: int | None = None  # cudaMalloc retries: fragmentation near the edge
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def peak_bytes(self) -> int | None:
        """The number that decides whether a size fits: reserved on GPU, RSS on CPU."""
        if self.peak_reserved_bytes is not None:
            return self.peak_reserved_bytes
        return self.peak_rss_bytes


@dataclass
class FitCheck:
    """How a size run only to learn whether it fits was run (no timed window)."""

    steps: int  # the steps run, the first included (where autotuners and workspaces allocate)
    cudnn_benchmark: bool | None  # torch.backends.cudnn.benchmark during the check (None: no cuDNN)
    cudnn_benchmark_target: bool | None  # ... as the target had set it
    note: str  # in words


@dataclass
class GpuActivity:
    """What NVML saw during the timed window of one size."""

    util_percent_mean: float | None = None  # duty cycle: share of time any kernel ran
    sm_activity_percent: float | None = None  # GPM: real SM activity
    tensor_activity_percent: float | None = None
    dram_bw_util_percent: float | None = None
    power_w_mean: float | None = None
    power_w_max: float | None = None
    power_limit_w: float | None = None
    clock_event_reasons: list[str] = field(default_factory=list)
    samples: int = 0
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def power_fraction(self) -> float | None:
        if self.power_w_mean is None or not self.power_limit_w:
            return None
        return self.power_w_mean / self.power_limit_w


@dataclass
class TrialResult:
    batch_size: int
    status: str
    message: str | None = None  # one line, for anything but ok
    phase: str | None = None  # where it failed: load, build, warmup, measure
    error_code: str | None = None  # bad_target: usage | bad_data | not_found
    timing: Timing | None = None
    memory: Memory = field(default_factory=Memory)
    gpu: GpuActivity | None = None
    gpu_unavailable: str | None = None  # why `gpu` is None (e.g. "CPU run")
    device: dict[str, Any] = field(default_factory=dict)  # type, name, index, uuid
    environment: dict[str, Any] = field(default_factory=dict)  # torch, cuda, driver, python
    duration_s: float | None = None  # the whole trial, process start-up included
    # a size past the knee run only to learn whether it fits (few timed iterations): its
    # memory counts, its timing is not a throughput or latency measurement
    fit_probe: bool = False
    # set when the size ran as a fit check (TrialSpec.fit_check_steps): a few steps to the
    # peak memory, untimed; None: timed as usual (warm-up, then the timed window)
    fit_check: FitCheck | None = None
    # True: ran in a process that had already run an earlier size (gpudoctor.sweep.reuse);
    # False: in a fresh one; None: not said (a result from before processes were reused)
    process_reused: bool | None = None
    # set when a run in a reused process failed and this answer is the fresh process's
    reuse_fallback: str | None = None
    # seconds by phase: start (the process, up to torch imported), load (device, context),
    # build, warmup, measure, and call (the parent's whole wait for this answer)
    phase_s: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == OK and self.timing is not None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        values = _known(cls, data)
        if values.get("timing") is not None:
            values["timing"] = Timing(**_known(Timing, values["timing"]))
        values["memory"] = Memory(**_known(Memory, values.get("memory") or {}))
        if values.get("gpu") is not None:
            values["gpu"] = GpuActivity(**_known(GpuActivity, values["gpu"]))
        if values.get("fit_check") is not None:
            values["fit_check"] = FitCheck(**_known(FitCheck, values["fit_check"]))
        if values.get("status") not in STATUSES:
            raise ValueError(f"unknown trial status {values.get('status')!r}")
        return cls(**values)


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """Only the fields this version knows: newer files load in older code."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}
