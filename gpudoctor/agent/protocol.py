"""The agent's events: what each kind carries, for the agent that writes them and the
collector (gpudoctor.collectors.events) that reads them.

On the wire (events.py) an event is one JSON object per line: the fields below, in the
order the agent passes them, then ``"k"`` (the kind) and ``"ts"`` (``time.time()`` when it
was emitted), see `Header`. `Agent.emit` takes the kind and the fields of one class below
(``agent.emit("step", src="loader", n=3, dur=0.02, wait=0.001)``); its overloads, one per
kind, let mypy check every call against the class, and every collector handler reads
its event as the same class.

Fields are only ever added, as ``NotRequired`` (recorded sessions and older agents must
keep loading); a reader never trusts a value's type (the file is written by another
process, possibly another gpudoctor version) and converts what it reads.

Standard library only (with typing_extensions for type checkers): the agent runs inside
the workload and imports this module for type checking only, never at run time (its
modules name these classes in annotations that are never evaluated). The supervisor's
side imports it as ``gpudoctor.agent.protocol``. At run time the classes are plain
TypedDicts whose optional keys are not known (``NotRequired`` is a string there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    from typing_extensions import NotRequired

# precedence order (stats.StepTracker says why); "time" only names a profiler window without steps
StepSource = Literal["explicit", "optimizer", "backward", "loader", "forward"]

# [name, file, line, own_s, cumulative_s, calls, caller]: one function of a fetch profile
# (fetch_profile.top_functions); a JSON array, whose mixed items a TypedDict cannot describe
FunctionRow = list[Any]

# a value an override sets or found (from the agent config's JSON, or read from torch)
OverrideValue = str | int | float | bool | None


class Header(TypedDict):
    """Added by the writer to every event, after its fields."""

    k: str  # the kind: one of KINDS (a newer agent may send kinds an older collector ignores)
    ts: float  # time.time() when emitted; a step's: when the step ended (Agent.emit_steps)


# -- the process ------------------------------------------------------------------------
class Hello(TypedDict):
    """A process started (agent.start), a DataLoader worker produced its first batch
    (role "worker"), or an in-process watch began (role "main")."""

    pid: int
    ppid: int | None
    python: NotRequired[str]  # sys.version's first word
    rank: NotRequired[str | None]  # the launcher's environment, as given
    local_rank: NotRequired[str | None]
    world_size: NotRequired[str | None]
    local_world_size: NotRequired[str | None]
    job_id: NotRequired[str | None]  # TORCHELASTIC_RUN_ID or SLURM_JOB_ID
    cuda_visible_devices: NotRequired[str | None]
    role: NotRequired[Literal["main", "worker"]]
    argv: NotRequired[list[str]]
    profiler_inherited: NotRequired[bool]  # a worker forked inside a profiler window


class Process(TypedDict):
    """The redacted command line, once the process imports torch."""

    argv: list[str]


class Torch(TypedDict):
    version: str | None
    cuda: str | None  # torch.version.cuda


class Dist(TypedDict):
    """The process joined a torch.distributed process group."""

    rank: int
    world_size: int
    backend: str


class Interrupt(TypedDict):
    """KeyboardInterrupt (or torchrun's SignalException) reached the top of the process."""

    type: str  # the exception class's name
    by_gpudoctor: NotRequired[bool | None]  # True: the stop --steps/--duration asked for


class Uncaught(TypedDict):
    """An uncaught exception ("exception"), or an uncaught CUDA out-of-memory error ("oom")."""

    type: str  # module-qualified class name (builtins without their module)
    message: str  # redacted, at most 2,000 characters
    traceback: str | None  # redacted, the last 8,000 characters
    thread: str | None  # the thread's name; None: the main thread (sys.excepthook)
    allocator: NotRequired[AllocatorSnapshot | None]  # "oom" only


class Bye(TypedDict):
    """The process's Python exit handlers ran."""

    pid: int


class AgentError(TypedDict):
    """The agent's own failure (rate-limited per place); the workload went on."""

    where: str
    error: str


# -- steps --------------------------------------------------------------------------------
class Step(TypedDict):
    """One step of one source (the first StepTracker.max_events per source; then steps_agg)."""

    src: StepSource
    n: int  # the source's step count, this one included
    dur: float  # seconds since the previous boundary of this source
    wait: float  # seconds waited for DataLoader batches in it
    bwd: NotRequired[float]  # seconds inside outermost backward() calls in it


class StepsAgg(TypedDict):
    """Steps past max_events, summed since the previous aggregate."""

    src: StepSource
    n: int
    dur: float
    wait: float
    total: int  # the source's step count so far


class ForwardRoot(TypedDict):
    """The module whose outermost forward marks steps (step_sources.ForwardSteps)."""

    module: str  # its class name
    thread: str


# -- DataLoaders --------------------------------------------------------------------------
class LoaderDescription(TypedDict):
    """What loaders.describe says of a DataLoader (values as the loader holds them)."""

    num_workers: int | None
    batch_size: int | None
    pin_memory: bool | None
    persistent_workers: bool | None
    prefetch_factor: int | None
    dataset_class: str | None  # module-qualified
    iterable: bool
    dataset_len: int | None
    dataset_root: str | None  # where the dataset reads from, when it says so


class Loader(LoaderDescription):
    """A DataLoader seen for the first time (its description follows the id on the wire)."""

    id: str  # "<pid>:<n>"


class LoaderWorkers(TypedDict):
    id: str
    pids: list[int]


class LoaderStats(TypedDict):
    """Per loader id: [batches, seconds waited in total, longest wait, iterators created, seconds the
    main thread spent creating them (starting workers)], cumulative; older agents send the first three."""

    stats: dict[str | None, list[float]]  # None: an iterator not adopted (JSON writes "null")


class Fetch(TypedDict):
    """What producing batches cost in this process, cumulative, per loader id (or
    "worker:<id>"): [batches, wall s, CPU s, run-queue s or None when not always known]."""

    stats: dict[str, list[float | None]]


class FetchProfileRequest(TypedDict):
    """The main process asked one loader process to profile its fetches (fetch_profile.py)."""

    loader: str


class FetchProfile(TypedDict):
    """Where producing a few batches spent its time (cProfile), by own time."""

    batches: int
    wall_s: float
    functions: list[FunctionRow]
    loader: str | None  # the loader id on the fetching thread (the main process's loaders)
    worker: int | None  # the DataLoader worker id
    t_start: NotRequired[float | None]  # wall clock: the first profiled fetch began
    t_end: NotRequired[float | None]  # ... the last one ended
    complete: NotRequired[bool]  # False: the process ended before the profile's last batch


# -- CUDA and the allocator ------------------------------------------------------------------
class CudaDevice(TypedDict):
    index: int
    uuid: str | None  # "GPU-..." or "MIG-..."
    name: str
    total_memory: int


class Cuda(TypedDict):
    """The devices this process holds memory on (sent again when they change)."""

    devices: list[CudaDevice]


class AllocatorSnapshot(TypedDict):
    """A compact torch.cuda.memory_stats() of the current device ("alloc", and inside "oom")."""

    label: str  # "periodic", "steady" (a profiler window's end), "end", "oom"
    device: int
    allocated_bytes: int
    reserved_bytes: int
    active_bytes: int
    inactive_split_bytes: int
    max_allocated_bytes: int
    max_reserved_bytes: int
    num_alloc_retries: int
    num_ooms: int
    device_free_bytes: NotRequired[int]
    device_total_bytes: NotRequired[int]
    expandable_segments: NotRequired[bool]  # PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF asks for it


class OomObserved(TypedDict):
    """An allocation the CUDA allocator could not serve (the workload may have caught it)."""

    device: int
    request_bytes: int
    device_allocated: int
    device_free: int
    allocator: AllocatorSnapshot | None


# -- profiler windows ------------------------------------------------------------------------
class CountedStep(TypedDict):
    """A phase's last warm-up step, its Python calls counted before its window (profiler.StepCount)."""

    t_start: float  # time.time() when the step began
    duration_s: float  # the step, slowed by the count: left out of the step statistics
    calls: int  # Python calls (builtins included) in that step
    stop_predicted_s: float  # the window's stop with Python stacks, predicted from them


class Profile(TypedDict):
    """A profiler window that ended (all but `error` always there), or only `error`: no
    window could be taken, and why."""

    source: NotRequired[StepSource | Literal["time"]]
    steps: NotRequired[int]
    t_start: NotRequired[float]  # time.time()
    t_end: NotRequired[float]
    why: NotRequired[str]  # what ended it: "steps", "source", "time", "fork", "exit", ...
    label: NotRequired[str]  # "start", "phase", "later"
    index: NotRequired[int]  # the window's number in its process, from 1
    loader: NotRequired[str | None]  # the phase: loader id, grad mode, CUDA in use (step windows)
    grad: NotRequired[bool | None]
    cuda: NotRequired[bool]
    path: NotRequired[str]  # the Chrome trace, relative to the session directory
    error: NotRequired[str]
    tf32: NotRequired[bool]
    float32_matmul_precision: NotRequired[str]
    # Kineto's CUPTI detach after a window that traced CUDA with TEARDOWN_CUPTI=1 (profiler.await_detach):
    # "ended" (finalized before the stop returned), "timeout", or "no thread" (none seen to start)
    cupti_detach: NotRequired[str]
    cupti_detach_ms: NotRequired[float]
    # it recorded Python stacks (with_stack): not where its phase's counted step predicted a long stop
    # (`counted`), nor after a stop that held the loop
    stacks: NotRequired[bool]
    stop_s: NotRequired[float]  # how long its stop and export held the loop (the GPU's queue drained first)
    counted: NotRequired[CountedStep]  # the phase's step counted before it (profiler.StepCount)


# -- diagnose --try ----------------------------------------------------------------------------
class Override(TypedDict):
    """A remedy the agent applied (or could not), overrides.py."""

    name: str
    value: OverrideValue
    was: OverrideValue
    where: str | None
    applied: bool
    note: str | None


class Write(TypedDict):
    """A path the workload wrote (writes.py); path None with overflow: more than it records."""

    path: str | None
    relative: NotRequired[bool]
    cwd: NotRequired[str | None]
    overflow: NotRequired[bool]


Kind = Literal[
    "hello", "process", "torch", "dist", "interrupt", "exception", "oom", "bye", "agent_error",
    "step", "steps_agg", "forward_root",
    "loader", "loader_workers", "loader_stats", "fetch", "fetch_profile_request", "fetch_profile",
    "cuda", "alloc", "oom_observed", "profile", "override", "write",
]

# each kind's fields (the Agent.emit overloads say the same to mypy)
EVENTS: dict[str, type] = {
    "hello": Hello,
    "process": Process,
    "torch": Torch,
    "dist": Dist,
    "interrupt": Interrupt,
    "exception": Uncaught,
    "oom": Uncaught,
    "bye": Bye,
    "agent_error": AgentError,
    "step": Step,
    "steps_agg": StepsAgg,
    "forward_root": ForwardRoot,
    "loader": Loader,
    "loader_workers": LoaderWorkers,
    "loader_stats": LoaderStats,
    "fetch": Fetch,
    "fetch_profile_request": FetchProfileRequest,
    "fetch_profile": FetchProfile,
    "cuda": Cuda,
    "alloc": AllocatorSnapshot,
    "oom_observed": OomObserved,
    "profile": Profile,
    "override": Override,
    "write": Write,
}
