"""The Session: everything one run recorded, as one serialisable object.

A Session is what the supervisor assembles from its own samplers and the agents'
event files, what `gpudoctor analyze` builds from a profiler trace, and what the
checks read. Checks never touch hardware: they read a Session only.

Rule: "not measured" is never zero. A value that could not be measured is `None`
and the reason is recorded in `Session.unavailable[fact]`. Fact names:

    loader     no DataLoader was iterated
    steps      no step boundaries (gpudoctor.step(), optimizer steps, backward calls,
               loader batches, outermost module forwards)
    cpu        psutil sampling of the process tree failed
    storage    no dataset path known, or the probe failed
    gpu        no NVIDIA GPU / driver / NVML, or the workload used no GPU
    gpm        GPM metrics (SM activity, tensor activity) unsupported or failing
    clock_events  NVML clock-event (throttle) reasons could not be read
    profile    no torch.profiler window (CPU-only run, disabled, failed to start)
    allocator  no CUDA caching-allocator statistics
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudoctor.session.codec import build, plain


# What `--try` keeps in the Session: the overrides a run saw, and each trial's outcome
# (re-exported by gpudoctor.trials.records, which the trials code reads).
@dataclass
class AppliedOverride:
    """One override as the agent applied it inside the workload (an "override" event)."""

    name: (
        str  # num_workers | pin_memory | persistent_workers | prefetch_factor | tf32 | cudnn_benchmark | compile | env
    )
    value: Any = None  # what the workload got
    was: Any = None  # what the workload had asked for (None when not known)
    where: str | None = None  # "DataLoader(mod.Items)", "torch.backends.cudnn.benchmark", "held", ...
    applied: bool = True  # False: it could not apply here (see note)
    note: str | None = None  # why not, or "the workload set allow_tf32 = False; kept True"
    pid: int | None = None


@dataclass
class TrialResult:
    """One re-run of the workload with one remedy applied."""

    name: str  # the remedy: workers | pin_memory | tf32 | expandable_segments | compile | ...
    label: str  # what was changed, in words: "num_workers=8, persistent_workers=True"
    override: dict[str, Any] = field(default_factory=dict)  # as asked of the agent ("env" for variables)
    findings: list[str] = field(default_factory=list)  # the findings this remedies; the first sized it
    numerics_change: bool = False  # TF32, compile: results may differ in the last bits
    predicted_gain: float | None = None  # the first finding's prediction
    measured_gain: float | None = None  # steady steps/s with the remedy / without it
    steps_per_s: list[float | None] = field(default_factory=list)  # [without, with]
    steady_steps: list[int] = field(default_factory=list)  # [without, with]
    status: str = "measured"  # measured | inconclusive | not-measured | interrupted | failed
    why: str | None = None  # when not measured
    applied: list[AppliedOverride] = field(default_factory=list)  # what the workload really saw
    exit_code: int | None = None
    stop_reason: str | None = None
    duration_s: float = 0.0
    report: str | None = None  # the trial's JSON report, relative to the main report's folder
    verdict: str | None = None  # the trial run's own verdict
    remaining: list[str] = field(default_factory=list)  # finding IDs the trial run still had


@dataclass
class Untried:
    """A finding (or a remedy asked for by name) that no trial could test, and why."""

    subject: str  # GD302, or a remedy name such as "compile"
    why: str


@dataclass
class Trials:
    requested: list[str] = field(default_factory=list)  # --try: ["auto"]; --try-only: the names given
    bound: str = ""  # the bounds every run shared: "--steps 200", "--duration 60"
    results: list[TrialResult] = field(default_factory=list)
    untried: list[Untried] = field(default_factory=list)

SESSION_SCHEMA = "gpudoctor.session/1"


class SessionError(Exception):
    """A Session file that cannot be read (missing, corrupt, wrong schema)."""


@dataclass
class GpuInfo:
    index: int  # NVML index (PCI order)
    uuid: str
    name: str
    memory_total_bytes: int | None = None
    power_limit_w: float | None = None  # enforced limit
    sm_clock_max_mhz: int | None = None
    gpm_supported: bool | None = None
    mig: bool | None = None


@dataclass
class CpuInfo:
    logical_cores: int | None = None
    physical_cores: int | None = None
    affinity_cores: int | None = None  # cores in the workload's CPU affinity mask
    cgroup_quota_cores: float | None = None  # cgroup cpu.max quota/period, None when unlimited
    usable_cores: float | None = None  # min(affinity, quota): what the workload may really use
    model: str | None = None


@dataclass
class Environment:
    python: str | None = None
    platform: str | None = None
    hostname: str | None = None
    torch: str | None = None
    cuda: str | None = None  # CUDA version torch was built with
    driver: str | None = None
    cpu: CpuInfo = field(default_factory=CpuInfo)
    gpus: list[GpuInfo] = field(default_factory=list)
    host_memory_total_bytes: int | None = None


@dataclass
class ProcessInfo:
    pid: int
    ppid: int | None = None
    role: str = "main"  # main | worker | child
    argv: list[str] = field(default_factory=list)
    torch: str | None = None
    cuda_visible_devices: str | None = None
    device_uuids: list[str] = field(default_factory=list)  # GPUs this process used
    # Python's exit handlers ran (atexit): False after os._exit, a fatal signal or a
    # native abort; None when not known (older sessions, processes still running)
    exit_handlers_ran: bool | None = None
    # torch.distributed: the rank this process trained as (from its process group, else the
    # launcher's RANK for a process that stepped); None outside a distributed job and for
    # the launcher (torchrun's own process)
    rank: int | None = None
    # a DataLoader worker found torch.profiler's tracing on at its first batch: it was forked
    # inside a profiler window (gpudoctor's or the workload's own) and pays for it per batch
    profiler_inherited: bool = False


@dataclass
class LoaderInfo:
    """One DataLoader as the agent saw it, with what its iteration cost."""

    loader_id: str  # "<pid>:<n>"
    pid: int
    num_workers: int
    batch_size: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    dataset_class: str | None = None
    dataset_len: int | None = None
    dataset_root: str | None = None
    iterable: bool = False
    batches: int = 0
    wait_total_s: float = 0.0  # time the consuming loop spent blocked in __next__
    wait_max_s: float = 0.0
    # iterators created (one per epoch, one in all with persistent_workers) and the main thread's
    # seconds creating them: starting the workers, time between steps that no __next__ holds
    iterators: int = 0
    iterators_s: float = 0.0
    # What producing a batch cost (measured where it happens: workers, or the main
    # process when num_workers == 0). cpu close to wall = CPU-bound preprocessing.
    fetch_batches: int = 0
    fetch_wall_s: float = 0.0
    fetch_cpu_s: float = 0.0
    # time the producing thread waited for a CPU (Linux schedstat): CPU-bound work on an
    # oversubscribed machine, not I/O. None when the OS does not report it.
    fetch_runqueue_s: float | None = None
    worker_pids: list[int] = field(default_factory=list)
    # where one process spent its time producing a few batches (cProfile), when the loop
    # waited for data; None when not profiled
    fetch_profile: FetchProfile | None = None


@dataclass
class FetchFunction:
    """One Python function of batch production, from cProfile."""

    name: str  # qualified name where Python records it ("Normalize.forward")
    file: str  # relative to the package or the working directory
    line: int  # the def line
    own_s: float  # its own time plus the builtins it called directly (a transform's torch.* calls)
    cumulative_s: float  # with everything it called
    calls: int = 0
    caller: str | None = None  # "func (file:line)" that spent the most time calling it


@dataclass
class FetchProfile:
    """cProfile over a few batches of one loader process (a worker, or the main process)."""

    pid: int
    batches: int
    wall_s: float  # time producing those batches
    functions: list[FetchFunction] = field(default_factory=list)  # by own time, most first
    worker: int | None = None  # worker id; None in the main process
    t_start: float | None = None  # seconds since session start: the first profiled fetch began
    t_end: float | None = None  # ... the last one ended (cProfile slowed the fetches in between)
    complete: bool = True  # False: the process ended before its last profiled batch


@dataclass
class StepRecord:
    t: float  # seconds since session start, at the end of the step
    duration_s: float
    data_wait_s: float  # time blocked on the loader during this step
    backward_s: float | None = None  # time inside outermost backward() calls (None: none seen, older agents)


@dataclass
class Steps:
    # explicit | optimizer | backward | loader | forward: the source that named the steps
    # (precedence in that order, gpudoctor/agent/stats.py)
    source: str | None = None
    count: int = 0
    records: list[StepRecord] = field(default_factory=list)  # bounded; see `aggregated`
    aggregated: int = 0  # steps counted but not kept individually (long runs)
    warmup_steps: int = 0  # leading steps excluded from steady-state statistics
    last_step_t: float | None = None  # end of the last step seen, kept or aggregated (s into the run)
    # steps that overlapped a profiler window (left out of `records`): how many, and their time
    # together, so a report can say what the windows cost (gpudoctor/analysis/observer.py)
    profiled_steps: int = 0
    profiled_time_s: float = 0.0


@dataclass
class CpuSample:
    t: float
    system_percent: float  # across usable cores, 0-100
    per_core_percent: list[float] = field(default_factory=list)
    tree_percent: float = 0.0  # whole process tree, in "cores x 100"
    main_percent: float | None = None  # the main Python process
    main_thread_percent: float | None = None  # its main thread only
    workers_percent: float | None = None  # DataLoader workers together
    tree_rss_bytes: int | None = None
    iowait_percent: float | None = None


@dataclass
class StorageProbe:
    path: str
    mount_point: str | None = None
    fs_type: str | None = None
    kind: str | None = None  # local | network | overlay | tmpfs | unknown
    device: str | None = None
    rotational: bool | None = None  # a hint only: virtio disks report 1 on SSD hosts
    files_read: int = 0
    bytes_read: int = 0
    read_latency_p50_ms: float | None = None
    read_latency_p95_ms: float | None = None
    throughput_mb_s: float | None = None
    direct_io: bool | None = None  # True when the page cache was bypassed
    error: str | None = None


@dataclass
class GpuSample:
    t: float
    gpu_index: int
    util_percent: float | None = None  # duty cycle: share of time any kernel ran
    mem_util_percent: float | None = None
    memory_used_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    clock_event_reasons: list[str] = field(default_factory=list)
    pcie_rx_mb_s: float | None = None
    pcie_tx_mb_s: float | None = None
    temperature_c: float | None = None
    # GPM (Hopper and newer): real activity, in percent
    sm_activity: float | None = None
    sm_occupancy: float | None = None
    tensor_activity: float | None = None
    dram_bw_util: float | None = None


@dataclass
class KernelStat:
    name: str
    count: int
    total_us: float
    mean_us: float
    max_us: float


@dataclass
class SyncSite:
    api: str  # e.g. cudaStreamSynchronize, aten::item
    count: int
    total_us: float
    site: str | None = None  # python call site when the profiler recorded one


@dataclass
class CallSite:
    """A Python call site of the workload, and what the work started there cost."""

    site: str  # "train_step (train.py:12)", or "(autograd engine)" for backward work
    gpu_us: float = 0.0  # GPU time of the kernels and copies launched from here
    launches: int = 0
    blocked_us: float = 0.0  # host time blocked in synchronisations made here
    syncs: int = 0
    cpu_us: float = 0.0  # CPU time of the outermost operators called from here


@dataclass
class ReplayScenario:
    """The profiled window replayed with one cause removed (gpudoctor.replay)."""

    name: str  # data | sync | launch | pinned | small_copies | tf32
    label: str  # "if batches arrived instantly"
    span_us: float  # the window's predicted duration
    gpu_busy_us: float = 0.0  # union of GPU activity in the replay
    kernel_busy_us: float | None = None  # union of kernels only: when the SMs had work
    changed: int = 0  # host items or GPU operations the edit changed
    detail: str = ""  # what was assumed (rates and where they come from)
    # the GPU's work in the drawn steps of the window's picture (WindowPicture), replayed with this
    # cause removed: start, length pairs, us from the replayed start of those steps
    picture: list[float] = field(default_factory=list)
    picture_bins: list[float] = field(default_factory=list)  # as PictureRow.bins, bins of picture_span_us / 1500
    picture_span_us: float | None = None


@dataclass
class PictureRow:
    """One row of the window's picture: a host thread, its DataLoader waits or syncs, or a GPU stream."""

    name: str  # "main thread", "DataLoader wait", "stream 7", ...
    kind: str  # cpu | data | sync | gpu
    spans: list[float] = field(default_factory=list)  # start, length, start, length ... us from the picture's start
    # bin, us, bin, us ...: time in the spans shorter than a bin (WindowPicture.bin_us), per bin
    bins: list[float] = field(default_factory=list)
    copies: list[float] = field(default_factory=list)  # gpu rows: the spans that were copies, as `spans`


@dataclass
class WindowPicture:
    """A few steps of a profiled window, reduced to what can be drawn (collectors/window_picture.py).

    Spans and idle gaps of at least `bin_us` are kept one by one; shorter ones are summed per
    bin of that width (a row's `bins`; the gaps' `idle_bins`, per cause).
    """

    start_us: float = 0.0  # the drawn steps' start, us after the window's first event
    span_us: float = 0.0
    steps: int = 0  # steps drawn (0: no step boundary, the whole window)
    step_marks: list[float] = field(default_factory=list)  # where each drawn step begins, us from start
    bin_us: float = 0.0
    rows: list[PictureRow] = field(default_factory=list)
    # start, length, cause (index in idle_causes.IDLE_CAUSES), call site + 1 (0: none), per gap
    gaps: list[float] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)  # the call sites the gaps name
    idle_bins: dict[str, list[float]] = field(default_factory=dict)  # cause -> idle us per bin, gaps too short to draw
    idle_by_cause_us: dict[str, float] = field(default_factory=dict)  # within the drawn steps


@dataclass
class ReplaySummary:
    """What the replay of the profiled window predicts (see gpudoctor/replay)."""

    steps: int = 0  # steps the window covers (0: unknown)
    scope: str = ""  # "": the whole window; else the part of a long window replayed (replay.window)
    measured_span_us: float = 0.0  # the trace's window as recorded
    baseline_span_us: float | None = None  # the model replayed as measured (after calibration)
    baseline_gpu_busy_us: float | None = None
    baseline_kernel_busy_us: float | None = None
    host_scale: float = 1.0  # host costs scaled by this to undo the tracing's own overhead
    data_scale: float = 1.0  # data waits scaled by this to the unprofiled wait per step
    calibration: str = ""  # how host_scale was chosen, in words
    # the replayed part's length in the run's steps (Session.steps.source): `steps` unless the window
    # counted another source (a GAN's optimizer steps, where the run counts DataLoader batches); 0: not known
    run_steps: float = 0.0
    # steady time outside the window that its steps do not stand for (an epoch's end and start:
    # checkpoints, evaluation, loader workers started again), over the replayed part's steps, us: the
    # same in every what-if, so a gain is (span + it) / (what-if span + it) (replay.scenarios.gain)
    unrepresented_us: float = 0.0
    unrepresented_wait_us: float = 0.0  # the data waits in it (an epoch's first batch, its workers starting)
    # how many of the unprofiled steady steps held it (0: not recorded): whether they come back with the
    # loader's epochs or less often (gpudoctor.analysis.batch_scaling)
    unrepresented_steps: int = 0
    launch_latency_us: float | None = None  # median launch-to-start latency
    queued_gap_us: float | None = None  # median gap between back-to-back queued operations
    scenarios: list[ReplayScenario] = field(default_factory=list)
    combined: dict[str, float] = field(default_factory=dict)  # "data+sync" -> predicted span, us
    seconds: float | None = None  # time the replay took
    error: str | None = None  # why there is no prediction
    # the drawn steps of the window's picture replayed as measured (ReplayScenario.picture)
    baseline_picture: list[float] = field(default_factory=list)
    baseline_picture_bins: list[float] = field(default_factory=list)
    baseline_picture_span_us: float | None = None

    def loop_us(self, span_us: float) -> float:
        """A replayed span of the window (the baseline's, a scenario's, a combination's, or the GPU's
        busy time in one) with the steady time its steps do not stand for, which no what-if changes."""
        return span_us + (self.unrepresented_us or 0.0)


@dataclass
class ProfileSummary:
    """Compact statistics of the torch.profiler window (never the raw trace)."""

    steps: int = 0
    window_s: float = 0.0
    kernel_count: int = 0
    kernel_total_us: float = 0.0
    kernel_duration_hist: dict[str, int] = field(default_factory=dict)  # bucket label -> count
    kernel_median_us: float | None = None
    gpu_busy_us: float = 0.0  # union of kernel + memcpy + memset intervals
    gpu_idle_us: float = 0.0
    idle_gap_kernel_to_kernel_us: float = 0.0  # gaps < 30 us
    idle_gap_host_wait_us: float = 0.0  # larger gaps, or the host launched after the GPU ran dry
    idle_gap_other_us: float = 0.0  # large gaps although the work was queued in time (dependencies)
    idle_after_sync_us: float = 0.0  # gaps that began while the host was blocked in a synchronisation
    launch_count: int = 0
    launch_total_us: float = 0.0  # CPU time of cudaLaunchKernel & co
    short_kernel_count: int = 0  # GPU time below its own launch time
    top_kernels: list[KernelStat] = field(default_factory=list)
    top_ops: list[KernelStat] = field(default_factory=list)
    memcpy: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> count/bytes/us
    memset_count: int = 0
    memset_us: float = 0.0
    sync_count: int = 0
    sync_total_us: float = 0.0
    sync_sites: list[SyncSite] = field(default_factory=list)
    matmul_fp32_us: float = 0.0  # sgemm-class kernels without tensor cores
    matmul_tensor_core_us: float = 0.0
    matmul_total_us: float = 0.0
    tf32_enabled: bool | None = None
    trace_file: str | None = None  # gzip Chrome trace beside the report, relative name
    window_start_s: float | None = None  # session time the window opened / closed
    window_end_s: float | None = None
    error: str | None = None
    replay: ReplaySummary | None = None  # predicted gains, from replaying the window
    # which window of the run this is (gpudoctor/agent/profiler.py): "start" (steady state
    # began), "phase" (a new phase: another loader, grad mode or step source), "later"
    label: str | None = None
    index: int = 0  # 1-based order among the run's windows; 0 when not known (analyze)
    step_source: str | None = None  # what marked its steps: optimizer, ..., forward; "time" without steps
    phase: str | None = None  # the phase in words: "loader 123:1 batches, no grad"
    # hotspots: operators by their own CPU time, and the call sites that cost the most
    top_cpu_ops: list[KernelStat] = field(default_factory=list)
    call_sites: list[CallSite] = field(default_factory=list)
    # per stream of the busiest device (its busy time above is their union: idle is time with
    # no activity on any stream): {"stream", "ops", "busy_us", "busy_share"}, busiest first
    streams: list[dict[str, Any]] = field(default_factory=list)
    # collective communication: NCCL kernels (``nccl*``) in the window, the union of their
    # GPU time, and the part of it that ran while compute kernels ran (on other streams)
    comm_kernel_count: int = 0
    comm_us: float = 0.0
    comm_overlap_us: float = 0.0
    # the GPU's idle time by cause (collectors/window_picture.IDLE_CAUSES): sums to gpu_idle_us
    idle_by_cause_us: dict[str, float] = field(default_factory=dict)
    picture: WindowPicture | None = None  # a few steps to draw, with their idle gaps by cause
    # Kineto's CUPTI detach at the window's stop (agent/profiler.await_detach): "ended" (finalized
    # before the run went on), "timeout" or "no thread"; None where no detach was asked for
    cupti_detach: str | None = None
    cupti_detach_ms: float | None = None
    # whether the window recorded Python stacks (no call sites without them): not where its counted
    # step predicted a stop of 2 s or more, nor once an earlier window's stop held the loop that long
    # (agent/profiler.STOP_HELD_S); None where not known
    stacks: bool | None = None
    stop_s: float | None = None  # how long its stop and the trace's export held the loop, as the agent timed it
    # its phase's last warm-up step, its Python calls counted before it (agent/profiler.StepCount): when
    # that step began (session time), its Python calls, and the stop with Python stacks they predicted
    # (at 2 s or more the window records none); None where no step was counted
    counted_start_s: float | None = None
    counted_calls: int | None = None
    stop_predicted_s: float | None = None


@dataclass
class AllocatorSnapshot:
    t: float
    label: str  # steady | end | oom
    allocated_bytes: int = 0
    reserved_bytes: int = 0
    active_bytes: int = 0
    inactive_split_bytes: int = 0
    max_allocated_bytes: int = 0
    max_reserved_bytes: int = 0
    num_alloc_retries: int = 0
    num_ooms: int = 0
    device_total_bytes: int | None = None
    device_free_bytes: int | None = None
    expandable_segments: bool | None = None
    requested_bytes: int | None = None  # label "oom": the allocation that failed


@dataclass
class ErrorEvent:
    pid: int
    kind: str  # exception | oom | agent_error | signal | exit
    type: str | None = None
    message: str = ""
    traceback: str | None = None
    t: float | None = None


@dataclass
class RankInfo:
    """One rank of a distributed job (torchrun, torch.multiprocessing.spawn, one per process).

    The Session's own steps, loaders and profile are the primary rank's (rank 0, see
    gpudoctor/run/assemble.py); each rank's own numbers are here, so the multi-GPU checks
    (GD5xx, gpudoctor/analysis/ranks.py) compare them and `gpudoctor merge` can join the
    Sessions of several nodes.
    """

    rank: int
    pid: int
    host: str | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None  # ranks on this node
    backend: str | None = None  # nccl | gloo | ...
    device_uuids: list[str] = field(default_factory=list)
    steps: Steps = field(default_factory=Steps)  # this rank's steps (same source rules as Session.steps)
    loader_ids: list[str] = field(default_factory=list)  # its DataLoaders (Session.loaders)
    loader_wait_s: float | None = None  # time its loop blocked on its loaders; None without one
    loader_workers: int | None = None  # DataLoader workers of its busiest loader
    # its GPU(s), mean over the run's samples while it stepped; None when not measured
    gpu_util_percent: float | None = None
    gpu_sm_activity_percent: float | None = None
    profile: ProfileSummary | None = None  # its primary profiler window
    exit_code: int | None = None  # None when not known
    error: str | None = None  # its first uncaught exception, "Type: message"


@dataclass
class Session:
    schema: str = SESSION_SCHEMA
    tool_version: str = ""
    command: list[str] = field(default_factory=list)  # secrets redacted
    cwd: str | None = None
    started_at: str | None = None  # ISO 8601
    duration_s: float = 0.0
    exit_code: int | None = None  # the workload's; 128+N when killed by signal N
    stop_reason: str | None = None  # exited | duration | steps | interrupted | terminated
    stop_requested_s: float | None = None  # when gpudoctor asked the workload to stop (s into the run)
    source: str = "diagnose"  # diagnose | analyze | synthetic | fixture
    environment: Environment = field(default_factory=Environment)
    processes: list[ProcessInfo] = field(default_factory=list)
    loaders: list[LoaderInfo] = field(default_factory=list)
    steps: Steps = field(default_factory=Steps)
    batch_size: int | None = None  # samples per step, when known
    cpu_samples: list[CpuSample] = field(default_factory=list)
    cpu_sample_interval_s: float | None = None
    storage: list[StorageProbe] = field(default_factory=list)
    gpu_samples: list[GpuSample] = field(default_factory=list)
    gpu_sample_interval_s: float | None = None
    profile: ProfileSummary | None = None  # the primary window (the first one)
    profiles: list[ProfileSummary] = field(default_factory=list)  # every window, in order, the primary too
    allocator: list[AllocatorSnapshot] = field(default_factory=list)
    errors: list[ErrorEvent] = field(default_factory=list)
    torch_cuda_used: bool | None = None  # the workload put work on a CUDA device
    # the workload's main process ended on the KeyboardInterrupt of gpudoctor's --steps/--duration stop
    interrupted_by_gpudoctor: bool | None = None
    # fact name -> reason it is unavailable ("gpu": "no NVIDIA driver found")
    unavailable: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # `diagnose --try` (gpudoctor/trials): the remedies this run was asked to apply (None for
    # a plain run), those the agent applied, and, in the main run, each trial's outcome
    overrides_requested: dict[str, Any] | None = None
    overrides: list[AppliedOverride] = field(default_factory=list)
    trials: Trials | None = None
    # a distributed job: every rank seen (empty for a one-process run), the job's id where the
    # launcher gave one (TORCHELASTIC_RUN_ID, SLURM_JOB_ID) and the rank of the primary view
    ranks: list[RankInfo] = field(default_factory=list)
    job_id: str | None = None
    primary_rank: int | None = None

    # ---- serialisation ------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = plain(self)  # clean(dataclasses.asdict(self)), in one walk
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Session:
        if not isinstance(data, dict):
            raise SessionError("not a gpudoctor session (expected a JSON object)")
        schema = data.get("schema")
        if not isinstance(schema, str) or not schema.startswith("gpudoctor.session/"):
            raise SessionError(f"not a gpudoctor session (schema {schema!r})")
        if schema != SESSION_SCHEMA:
            raise SessionError(f"unsupported session schema {schema!r} (this gpudoctor reads {SESSION_SCHEMA})")
        from gpudoctor.session.limits import validate

        try:
            session = build(cls, data)
            validate(session)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise SessionError(f"malformed session: {exc}") from None
        return session  # type: ignore[no-any-return]

    def save(self, path: Path) -> None:
        from gpudoctor.base.fsutil import write_atomic

        write_atomic(path, json.dumps(self.to_dict(), indent=1, allow_nan=False).encode())

    @classmethod
    def load(cls, path: Path) -> Session:
        from gpudoctor.base.fsutil import InputTooLarge, read_limited, unreadable_reason

        try:
            raw = read_limited(Path(path))
        except InputTooLarge as exc:
            raise SessionError(f"{path}: {exc}") from None
        except IsADirectoryError:
            raise SessionError(f"{path}: is a directory, expected a session .json file") from None
        except OSError as exc:
            raise SessionError(f"{path}: {unreadable_reason(exc)}") from None
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise SessionError(f"{path}: not valid JSON (corrupt or truncated session file)") from None
        if isinstance(data, dict) and "session" in data and "schema" in data and str(
            data.get("schema", "")
        ).startswith("gpudoctor.report/"):
            data = data["session"]
        try:
            return cls.from_dict(data)
        except SessionError as exc:
            raise SessionError(f"{path}: {exc}") from None

    # ---- derived facts the checks share --------------------------------------
    def fact(self, name: str) -> str | None:
        """Return None when `name` is available, else the reason it is not."""
        return self.unavailable.get(name)

    def main_processes(self) -> list[ProcessInfo]:
        return [p for p in self.processes if p.role != "worker"]

    def crashes_before_stop(self) -> list[ErrorEvent]:
        """Uncaught exceptions, by time, less those raised once the workload was asked to
        stop: whatever a launcher turns the stop signal into (torchrun's SignalException, a
        DataLoader's broken worker) is the stop, not a crash."""
        crashes = sorted((e for e in self.errors if e.kind == "exception"),
                         key=lambda e: e.t if e.t is not None else float("inf"))
        asked = self.stop_requested_s
        if asked is None or self.stop_reason in (None, "exited"):
            return crashes
        return [e for e in crashes if e.t is None or e.t < asked]

    def windows(self) -> list[ProfileSummary]:
        """Every profiled window, the primary first (older sessions hold only `profile`)."""
        if not self.profiles:
            return [self.profile] if self.profile is not None else []
        primary = self.profile
        return ([primary] if primary is not None else []) + [p for p in self.profiles if p != primary]

    def steady_steps(self) -> list[StepRecord]:
        return self.steps.records[self.steps.warmup_steps :]
