"""Bounded torch.profiler windows: the start of steady state, each new phase, and later.

The raw traces go to the session directory; the supervisor turns each into compact
statistics (gpudoctor.collectors.trace) after the run, so the workload pays only for
the windows themselves and one export each.

Safety rules:
- A window opens and closes only on the thread that runs the steps, inside a step
  boundary or a safe point (safepoints.py). Never from the agent's own thread: on an
  H200, starting Kineto from another thread aborted the process ("External init
  callback must run in same thread as registerClient"), and importing torch.profiler
  there raced the workload's own imports.
- Nothing is hooked under torch.compile (a global hook would make dynamo trace it, and
  adding or removing one could make it recompile); a workload running its own
  profiler gets no window from gpudoctor.
- A run that ends inside a window keeps what was recorded: the window is stopped and
  exported at interpreter exit (the agent's exit handler, registered right after
  torch's own so it runs before them) when it runs on the main thread, or when its
  thread ends (a thread-local guard) when it runs on another one.

When: steps come from the highest-precedence active source (stats.StepTracker:
explicit > optimizer > backward > loader > forward). A window opens after
`profile_warmup_steps` steps and `profile_warmup_s` seconds of a phase, or ten times
those steps (the first iterations of a fast loop are not steady: allocator growth,
library handles); on CUDA twice those steps (a GPU-bound loop of a few dozen steps
queues them all within its first second, and must still get a window), and closes after at least `profile_steps`
steps and `profile_min_window_s` seconds (at most `profile_max_steps` steps, or
`profile_max_window_s`); a window of slow steps closes earlier, once it holds
`profile_min_steps` steps and has run `profile_window_budget_s` (the trace, and the pause
its stop costs the loop, grow with every traced step, while the replay reads at most
150,000 events of a window). A phase is (step source, the DataLoader last iterated on that
thread, grad mode, CUDA in use): the first window is "start"; a phase not seen before
(an evaluation loop under no_grad, another loader, a forward-only phase once training
stops) gets a "phase" window; one "later" window comes at least `profile_later_s`
after the first, at a new epoch of its loader. At most `profile_max_windows` in all.

Runs without any step boundary (no module, loader, optimizer or backward) get a
time-bounded window: `profile_no_step_after_s` after CUDA started (and after the last
step, if any), the agent's thread arms the safe points; the main thread's next
hooked call opens the window, and the first one after `profile_time_window_s` (or
after `profile_time_max_calls` hooked calls, which bounds the trace) closes it and
disarms. A step that shows up while it runs discards it: the step-driven window takes
over. CPU-only runs get CPU-only windows from their steps.

A window's stop holds the loop while torch collects and exports its trace, for a time that
grows with the events traced (with_stack records every Python call). So the last warm-up step
of each phase is counted (its Python calls; StepCount below), and a window whose
stop that count predicts at `profile_stop_held_s` (STOP_HELD_S) or more records no Python
stacks; once a stop held the loop that long anyway, later windows record none either.

No process is forked inside a window. A child forked while torch.profiler runs keeps
the parent's profiler state for its whole life: every operator goes through the
profiler's callbacks and every Python call through its stack tracer, and nothing ever
stops them there. A DataLoader whose workers start inside a window then produces
batches 2-3 times slower until its (persistent) workers end: on an H200 a loop fed
by two such workers ran at 11 steps/s under gpudoctor against 35 plain. So a fork on
the window's thread closes the window first (kept when it saw a whole step, else
discarded, to be taken again later; a time-bounded window is discarded once when a
fork comes before `profile_min_window_s`: _keep_at_fork); a fork on another thread cannot close it, and
the child then switches the inherited tracing off before it runs anything else.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import weakref

from .stats import StepTracker

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any, Literal

    from .protocol import Profile, StepSource
    from .torch_hooks import TorchHooks

    WindowSource = StepSource | Literal["time"]
    # (source, the DataLoader last iterated on the thread, grad mode, CUDA in use), or ("time",)
    PhaseKey = tuple[Any, ...]

MAIN_THREAD = threading.main_thread().ident
_RANK = {source: i for i, source in enumerate(StepTracker.SOURCES)}
_WINDOWS: weakref.WeakSet[ProfilerWindow] = weakref.WeakSet()  # the process's windows, seen at each fork
_FORK_HANDLERS: list[bool] = []  # registered once per process


def _watch_forks(window: ProfilerWindow) -> None:
    """One pair of fork handlers per process (an in-process watch makes a window per call)."""
    if not _FORK_HANDLERS:
        _FORK_HANDLERS.append(True)
        try:
            os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
        except (AttributeError, ValueError):  # no fork on this platform
            pass
    _WINDOWS.add(window)


def _before_fork() -> None:
    for window in list(_WINDOWS):
        window._before_fork()


def _after_fork_in_child() -> None:
    for window in list(_WINDOWS):
        window._after_fork_in_child()



# Kineto prints "USDT: ... profiler_start" / "profiler_stop" on the process's stderr at every
# window, whatever the log level asked for, unless KINETO_LOG_LEVEL is above its USDT level
# (5) when it first starts. The variable is set only around that start, and only when the
# user did not set it: their environment is left as it was.
KINETO_QUIET_LEVEL = "6"


class _quiet_kineto:
    def __enter__(self) -> _quiet_kineto:
        self.set = "KINETO_LOG_LEVEL" not in os.environ
        if self.set:
            os.environ["KINETO_LOG_LEVEL"] = KINETO_QUIET_LEVEL
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        if self.set:
            os.environ.pop("KINETO_LOG_LEVEL", None)
        return False

# Kineto leaves CUPTI attached after a window unless TEARDOWN_CUPTI=1 (torch leaves it unset):
# its callbacks then stay on every CUDA launch for the rest of the run. On an H200 a
# launch-bound loop (thousands of tiny kernels per step) ran 25% slower outside the windows
# for it, and within 1% of plain with the variable set. Kineto reads it when a window starts
# (to re-attach lazily) and when it stops (to detach), so it is set for each window's life,
# and only when the user did not set it: torch itself sets "0" for CUDA graphs compiled by
# inductor, whose capture does not survive a detach (CUDA 11 and early 12 crashed there).
CUPTI_TEARDOWN_MIN_CUDA = (12, 0)
# Kineto's detach is not done when the window's stop returns: a detached thread of Kineto flushes
# CUPTI, then waits for the next CUDA call's exit to finalize it, and only then reads the variable
# again: unset by then, it re-attaches CUPTI's callbacks at once (Kineto's "lazy re-init" is on only
# while TEARDOWN_CUPTI=1), and every launch pays for them for the rest of the run. How long that
# thread takes is not ours to know: a fixed 2 s wait lost the race now and then (on an H200, one
# diagnosed run in three of a loop that starts new workers every 4 batches ran at 26 steps/s
# against 40-44), and a wait of 3 steps and 0.1 s lost it in every run of that loop on an H100
# (23-25 steps/s against 37-43). So once a window has traced CUDA the variable stays set for the
# rest of the process: an in-process watch that ends cannot know when Kineto's thread is done
# either, and a process whose launches paid CUPTI's callbacks from then on would be harmed by its
# diagnosis; Kineto reads the variable only around windows. A second window started before the
# finalize loses its GPU events to it (Kineto's own issue, pytorch/kineto#1554), so no window
# starts until the detach is presumably done: once the stepping thread has run
# CUPTI_TEARDOWN_STEPS steps (each a run of CUDA calls: the finalize happens at the first call
# after Kineto's flush) and CUPTI_TEARDOWN_MIN_S has passed, or after CUPTI_TEARDOWN_WAIT_S without
# steps (a stepless run). A fixed 2 s wait there cost a short run its only window: a time window
# superseded by the run's first step (1.3 s of 3.5 ms steps on an H100) left none. torch itself
# writes "0" when it compiles CUDA graphs (their capture does not survive a detach on CUDA before
# 12.6): that value is torch's, never removed or overwritten here.
CUPTI_TEARDOWN_WAIT_S = 2.0
CUPTI_TEARDOWN_STEPS = 3
CUPTI_TEARDOWN_MIN_S = 0.1
# Kineto's detach thread is started inside the window's stop, and ends once the finalize it waits
# for has run (at the exit of a CUDA runtime call, on whichever thread makes one first). So the
# stop watches for it: it takes the process's threads before and after torch's stop, and until those
# that the stop started have ended it makes a cheap runtime call (a stream query) between looks.
# The finalize then runs on the window's own thread, before the workload goes on (a DataLoader's
# fork of new workers, the next step's launches, the agent's own periodic CUDA call), and is known
# to be done. Where no thread appeared (another Kineto, no /proc) or not all ended within
# CUPTI_DETACH_TIMEOUT_S, the stop goes on and the guard falls back to the wait above.
CUPTI_DETACH_TIMEOUT_S = 0.5
CUPTI_DETACH_POLL_S = 0.0002
# A window's stop (torch's stop, then the export) holds the loop for a time that grows with the
# events recorded, and with_stack's Python tracer records one for every Python call: 4-10 us each at
# the stop on H100/H200 hosts. A window of a loop that makes its batches in its own process (ImageNet's
# example with --workers 0: about 390,000 traced events a step) traced 1.2-3.9M events and held the
# loop 15-31 s at its stop, and a window that followed would hold it as long again; the stop of a
# window of ops and GPU work takes 0.1-0.9 s (the corpus's recorded Sessions, 2026-12-04 to -07). So a
# window whose stop its phase's counted step (StepCount) predicts at STOP_HELD_S or more records no
# Python stacks (its operators, kernels, copies and syncs, without call sites), and once a window's
# stop held the loop that long anyway (the GPU's queue drained first: that wait is the workload's
# own), later windows record none either.
STOP_HELD_S = 2.0
# The stop's cost per Python call that a step makes, as StepCount counts them (Python and builtin calls,
# what cProfile counts too): a window's held time over the counted calls of its steps was 3.5-10 us on
# the 2-core CPU VM (medians 3.8-3.9 us for batches of Python-heavy items of 100-400 calls, 5.8 us at
# 1,600, 8.4-9.7 us for stacks of 24-96 small modules with AdamW, whose operators add events:
# benchmarks/stop_cost.py), and a traced event's cost 4-10 us on the H100/H200 hosts. So a window is
# predicted to hold the loop its expected steps x the counted step's calls x STOP_S_PER_CALL, a value
# in the middle of those.
STOP_S_PER_CALL = 6e-6


def thread_ids() -> frozenset[str]:
    """The process's threads (Linux's /proc/self/task); empty where they cannot be listed."""
    try:
        return frozenset(os.listdir("/proc/self/task"))
    except OSError:
        return frozenset()


def await_detach(before: frozenset[str], poke: Callable[[], object],
                 timeout: float = CUPTI_DETACH_TIMEOUT_S) -> tuple[str, float]:
    """After a window's stop: wait until the threads started since BEFORE (Kineto's detach among
    them) have ended, calling POKE (a CUDA runtime call) between looks. Returns how it went ("ended",
    "timeout", or "no thread" when the stop started none) and the milliseconds it took. All of them:
    the variable is given back after "ended", and Kineto's thread, if it were the one still running,
    would read it unset and re-attach CUPTI for the rest of the run."""
    began = time.perf_counter()
    started = thread_ids() - before
    if not before or not started:
        return "no thread", 0.0
    deadline = time.monotonic() + timeout
    while True:
        try:
            poke()
        except Exception:  # noqa: BLE001 (no runtime call possible: the guard's own wait instead)
            return "timeout", (time.perf_counter() - began) * 1e3
        if not started & thread_ids():  # all of them: a short-lived other one must not pass for it
            return "ended", (time.perf_counter() - began) * 1e3
        if time.monotonic() >= deadline:
            return "timeout", (time.perf_counter() - began) * 1e3
        time.sleep(CUPTI_DETACH_POLL_S)


class _cupti_teardown:
    """TEARDOWN_CUPTI for each window's life and, once a window traced CUDA, for the rest of the
    process: one per process (shared_teardown), so that a second in-process watch waits for the
    first one's detach too and keeps treating the value as ours, not the user's."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.set = False  # the variable is ours (set by __enter__), to remove
        self.wait_until: float | None = None  # set by later(): the wait's end without steps (monotonic clock)
        self.stepped_until: float | None = None  # the wait's end once CUPTI_TEARDOWN_STEPS steps ran
        self.steps_left = 0  # steps the stepping thread still owes before stepped_until counts
        self.traced_cuda = False  # a window traced CUDA with the variable set: it stays from then on
        self.lock = threading.Lock()  # calls come from the stepping thread and the agent's

    def __enter__(self) -> _cupti_teardown:
        try:
            cuda = tuple(int(x) for x in (self.torch.version.cuda or "0").split(".")[:2])
        except (AttributeError, ValueError):
            cuda = (0,)
        with self.lock:
            self.wait_until = self.stepped_until = None
            ours = self.set and os.environ.get("TEARDOWN_CUPTI") == "1"  # kept since an earlier window
            self.set = ours or ("TEARDOWN_CUPTI" not in os.environ and cuda >= CUPTI_TEARDOWN_MIN_CUDA)
            if self.set:
                os.environ["TEARDOWN_CUPTI"] = "1"
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        """A window ends without a stop that traced CUDA (it failed to start, or was abandoned): ours
        goes, unless an earlier window's detach keeps it for the rest of the watch."""
        with self.lock:
            if not self.traced_cuda:
                self._restore()
        return False

    def _restore(self) -> None:
        self.wait_until = self.stepped_until = None
        self.traced_cuda = False
        if self.set and os.environ.get("TEARDOWN_CUPTI") == "1":
            os.environ.pop("TEARDOWN_CUPTI", None)
        self.set = False

    def stopping(self, cuda: bool) -> frozenset[str] | None:
        """Just before a window's stop: the process's threads, where Kineto's detach will follow the
        stop (the window traced CUDA with the variable 1); else None."""
        if cuda and os.environ.get("TEARDOWN_CUPTI") == "1":
            return thread_ids()
        return None

    def later(self, cuda: bool, detached: bool = False) -> None:
        """A window stopped. One that traced CUDA with the variable set (by us or the user) makes the
        next window wait for its detach (pending), and keeps ours set from then on (watch_ended),
        unless its detach was seen to end (`detached`: Kineto's thread has read the variable for the
        last time) and no earlier one is unaccounted for: then ours goes at once, as it does after a
        window without CUDA."""
        with self.lock:
            if cuda and os.environ.get("TEARDOWN_CUPTI") == "1":
                if detached and not self.traced_cuda:
                    self._restore()
                    return
                now = time.monotonic()
                self.traced_cuda = True
                self.wait_until = now + CUPTI_TEARDOWN_WAIT_S
                self.stepped_until, self.steps_left = now + CUPTI_TEARDOWN_MIN_S, CUPTI_TEARDOWN_STEPS
            elif not self.traced_cuda:
                self._restore()  # no CUDA traced: no detach to wait for

    def pending(self) -> bool:
        """A stopped window's detach may still be under way: no window starts yet."""
        return self.wait_until is not None

    def detach_due(self, stepped: bool = False) -> None:
        """End the wait if the detach is done by now (`stepped`: the stepping thread ended a step, a
        run of CUDA calls, since the last call). The variable stays: see watch_ended."""
        at = self.wait_until
        if at is None:
            return
        if stepped:
            self.steps_left -= 1
        now = time.monotonic()
        stepped_until = self.stepped_until
        if now < at and (self.steps_left > 0 or stepped_until is None or now < stepped_until):
            return
        with self.lock:
            if self.wait_until == at:  # not ended meanwhile (and no window begun) by another thread
                self.wait_until = self.stepped_until = None

    def watch_ended(self) -> None:
        """The watch ended (the run's exit, an in-process watch's end). Ours goes only where no window
        traced CUDA: after one, Kineto's detach may still be waiting for a CUDA call, and finding the
        variable unset it would re-attach CUPTI's callbacks for the rest of the process."""
        with self.lock:
            if not self.traced_cuda:
                self._restore()

    def forked(self) -> None:
        """In a child forked meanwhile: the parent's detach is not its to wait for, and the variable
        is the parent's: the child gets its environment back."""
        self.lock = threading.Lock()  # a copy held by another thread at the fork would stay held
        self._restore()


@functools.cache
def shared_teardown(torch: ModuleType) -> _cupti_teardown:
    """The process's guard (one torch a process)."""
    return _cupti_teardown(torch)


# torch.profiler's start asks `hasattr(torch, "_inductor")` to learn whether inductor's CUDA
# graphs are on; torch answers a lazy attribute by importing it, so the first window of a run
# that never compiled imported torch._dynamo and torch._inductor on the workload's thread:
# 2.2 s on a CPU, most of the 3.7 s the first window took to start on an H200, a pause in a
# 6-second inference loop that cost a third of its inferences. A run that has not imported
# inductor has no inductor CUDA graphs, so for the start alone the attribute is not lazy.
LAZY_INDUCTOR = "_inductor"


class _no_lazy_inductor:
    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.lazy: object = None

    def __enter__(self) -> _no_lazy_inductor:
        lazy = getattr(self.torch, "_lazy_modules", None)
        if (isinstance(lazy, (set, frozenset)) and LAZY_INDUCTOR in lazy
                and self.torch.__name__ + "." + LAZY_INDUCTOR not in sys.modules):
            self.lazy = lazy
            setattr(self.torch, "_lazy_modules", frozenset(lazy - {LAZY_INDUCTOR}))  # noqa: B010 (torch's private global)
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        if self.lazy is not None:
            setattr(self.torch, "_lazy_modules", self.lazy)  # noqa: B010 (torch's private global)
            self.lazy = None
        return False


class _Window:
    def __init__(self, source: WindowSource, label: str, n: int, key: PhaseKey, index: int, cuda: bool) -> None:
        self.source = source
        self.label = label
        self.start_n = n
        self.key = key
        self.index = index
        self.thread = threading.get_ident()
        self.start_wall = time.time()
        self.last_wall = self.start_wall  # when its latest step ended
        self.longest = 0.0  # its longest step so far, s
        self.cuda = cuda  # it traces CUDA activity (so CUPTI detaches after it)
        self.stacks = True  # it records Python stacks (with_stack)
        self.count: StepCount | None = None  # its phase's counted step, when one was
        self.predicted_s: float | None = None  # the stop that count predicted with stacks


class StepCount:
    """One step of a phase counted, the last of its warm-up: how many Python calls a step makes (a profile
    function's "call" and "c_call" events, the calls cProfile counts), which is what a window that records
    Python stacks traces, and what its stop's cost grows with.

    The profile function is set for that one step only, on the stepping thread (it slows a Python-heavy
    step 1.2-5x, about as much as tracing it), and never where one is set already (the workload's, the
    fetch profile's). It is the legacy profile hook (sys.setprofile), not cProfile: on Python 3.12+
    cProfile takes the one sys.monitoring profiler slot, and a workload enabling its own cProfile then
    would fail. Only the counting thread takes its hook off (on another thread it would take off that
    thread's). The step's span goes to the Session with the window's event, which leaves that step out
    of the step statistics."""

    def __init__(self, source: WindowSource, key: PhaseKey) -> None:
        self.source = source
        self.key = key
        self.thread = threading.get_ident()
        self.calls = 0
        self.took = 0.0
        self.abandoned = False  # abandoned from another thread: its own next boundary takes the hook off
        self.wall = time.time()
        self.began = time.perf_counter()
        sys.setprofile(self._count)

    def _count(self, frame: object, event: str, arg: object) -> None:
        if event == "call" or event == "c_call":
            self.calls += 1

    def end(self) -> bool:
        """On its thread (its source's next boundary, or a fork): take the hook off. True when the step was
        counted whole: not abandoned, and the hook still ours (a profiler the workload set meanwhile
        replaced it, and stays)."""
        self.took = time.perf_counter() - self.began
        ours = sys.getprofile() == self._count  # a bound method: equal, not the same object
        if ours:
            sys.setprofile(None)
        return ours and not self.abandoned and self.calls > 0


class _ThreadEnd:
    """Kept in a thread-local: dropped, on that thread, when the thread ends."""

    def __init__(self, owner: ProfilerWindow) -> None:
        self.owner = owner

    def __del__(self) -> None:
        try:
            self.owner.stop("thread-end")
        except Exception:  # noqa: BLE001 (a finalizer never raises)
            pass


class ProfilerWindow:
    IDLE, RUNNING, DONE = "idle", "running", "done"

    def __init__(self, hooks: TorchHooks) -> None:
        self.hooks = hooks
        self.torch = hooks.torch
        config = hooks.agent.config
        self.warmup = int(config.get("profile_warmup_steps", 5))
        self.warmup_s = float(config.get("profile_warmup_s", 1.0))
        self.steps = int(config.get("profile_steps", 10))
        self.min_window = float(config.get("profile_min_window_s", 0.3))
        self.max_steps = max(self.steps, int(config.get("profile_max_steps", 200)))
        self.max_window = float(config.get("profile_max_window_s", 20.0))
        self.budget = float(config.get("profile_window_budget_s", 2.0))
        self.min_steps = min(self.steps, max(2, int(config.get("profile_min_steps", 3))))
        self.no_step_after = float(config.get("profile_no_step_after_s", 3.0))
        self.time_window = float(config.get("profile_time_window_s", 2.0))
        self.time_max_calls = int(config.get("profile_time_max_calls", 5000))
        self.max_windows = int(config.get("profile_max_windows", 4))
        self.stop_held = float(config.get("profile_stop_held_s", STOP_HELD_S))  # 0: stacks in every window
        self.stacks = True  # later windows record Python stacks: until a stop held the loop `stop_held`
        self.counting: StepCount | None = None  # the step being counted now
        self.counts: dict[PhaseKey, StepCount | None] = {}  # phase key -> its counted step (None: could not count)
        self.later_after = float(config.get("profile_later_s", 60.0))
        self.state = self.IDLE
        self.prof: Any = None  # the torch.profiler.profile of the running window
        self.window: _Window | None = None  # the latest window, set by start()
        self.taken = 0  # windows opened (a discarded one is given back)
        # (key, the source's step count and the time when the phase began)
        self.phase: tuple[PhaseKey, int, float] | None = None
        self.profiled: dict[PhaseKey, int] = {}  # phase key -> its loader's epoch when profiled
        self.first_end: float | None = None
        self.later_taken = False
        self.epoch: tuple[int, int] | None = None  # (the phase loader's epoch, the step count when first seen)
        self.cuda_seen: float | None = None  # when the agent's thread first saw CUDA initialized
        self.compile_stepless = False  # a quiet CUDA run under torch.compile was refused a time window
        self.pending: str | None = None  # label of the time window the safe points are armed for
        self.calls = 0
        self.guards = threading.local()
        self.safepoints = getattr(hooks, "safepoints", None)
        self.forked_inside = False  # a fork happened while a window ran that could not be closed first
        self.time_fork_discarded = False  # a fork discarded a time-bounded window (_keep_at_fork)
        self.teardown = shared_teardown(self.torch)  # TEARDOWN_CUPTI for each window's life, and after
        _watch_forks(self)

    # -- step-driven windows (on the stepping thread) -----------------------------
    def on_step(self, source: StepSource, n: int) -> None:
        self.teardown.detach_due(stepped=self.teardown.pending() and self.hooks.cuda_initialized())
        if self.state == self.DONE:
            return
        if self.counting is not None:
            self._counted(source)
        if self.state == self.RUNNING:
            self._step_inside(source, n)
            return
        if source != self.hooks.steps.active():
            return
        key = self._phase_key(source)
        if self.phase is None or self.phase[0] != key:
            self.phase = (key, n, time.time())
            if self.warmup == 1:
                self._count(source, key)
            return
        done = n - self.phase[1]
        if done == self.warmup - 1:  # the boundary that begins the phase's last warm-up step
            self._count(source, key)
        # on CUDA twice the warm-up steps is enough: a host running ahead of a busy GPU queues a few
        # dozen long steps within the first second, and such a run would get no window at all
        steps_instead = (2 if key[3] else 10) * self.warmup
        if done < self.warmup or (time.time() - self.phase[2] < self.warmup_s and done < steps_instead):
            return
        epoch = self.hooks.loader_epochs.get(key[1], 0) if key[1] is not None else 0
        if self.epoch is None or self.epoch[0] != epoch:
            self.epoch = (epoch, n)  # a new epoch: its first steps start workers again
        label = self._due(key, n - self.epoch[1] >= self.warmup)
        if label is not None:
            if self.pending is not None:
                self.disarm()  # a time window was due, but steps came first
            self.start(source, n, label, key)

    def _step_inside(self, source: StepSource, n: int) -> None:
        """A step boundary while a window runs: close it when it has run its steps, or another source took over."""
        window = self.window
        assert window is not None  # RUNNING: start() set it
        if window.source == "time":
            if threading.get_ident() == window.thread:
                self.stop("superseded", keep=False)  # the run has steps after all: profile those
        elif threading.get_ident() == window.thread:
            if source == window.source:
                now = time.time()
                window.longest, window.last_wall = max(window.longest, now - window.last_wall), now
                why = self._ended(n - window.start_n, now - window.start_wall, window.longest)
                if why is not None:
                    self.stop(why)
            elif _RANK[source] < _RANK[window.source] and source == self.hooks.steps.active():
                self.stop("source")  # a higher-precedence source took over: keep what was seen

    def _count(self, source: StepSource, key: PhaseKey) -> None:
        """At the boundary that begins a phase's last warm-up step: count that step's Python calls
        (StepCount), where a window of this phase may come and would record Python stacks."""
        if key in self.counts or self.counting is not None or not self.stacks or self.stop_held <= 0 \
                or self.hooks.compile_used or self._due(key) is None:
            return
        if sys.getprofile() is not None:
            self.counts[key] = None  # another profiler has the hook: the window keeps its stacks
            return
        self.counting = StepCount(source, key)

    def _counted(self, source: StepSource) -> None:
        """A boundary while a step is counted: the counted step ends at its source's next one, on its thread."""
        counting = self.counting
        if counting is not None and counting.source == source and counting.thread == threading.get_ident():
            self.counting = None
            self.counts[counting.key] = counting if counting.end() else None

    def _stacks(self, window: _Window) -> bool:
        """Whether WINDOW records Python stacks: not once a stop held the loop `stop_held`, nor where
        its phase's counted step predicts its stop at that or more (STOP_S_PER_CALL). The steps it is
        expected to run are those _ended would close it after, were each as long as the counted one
        (a few calls: `profile_max_steps` may be a million)."""
        if not self.stacks:
            return False
        count = self.counts.get(window.key) if window.source != "time" else None
        if count is None or self.stop_held <= 0:
            return True
        # a step as long as the counted one (counting slows it about as tracing does), or as the phase's
        # steps so far where longer: a host that runs ahead of a GPU queues a step in milliseconds, and the
        # window's steps then take the GPU's time (H100, loader_reiter: a 4 ms counted step said 78 steps
        # to fill the window's minimum length; it ran 11-14)
        took = max(count.took, self._phase_step_s(window), 1e-6)
        steps, last = 1, self.max_steps  # _ended holds from some k on: the first such, by bisection
        while steps < last:
            middle = (steps + last) // 2
            if self._ended(middle, middle * took, took) is None:
                steps = middle + 1
            else:
                last = middle
        window.count = count
        window.predicted_s = count.calls * steps * STOP_S_PER_CALL
        return window.predicted_s < self.stop_held

    def _phase_step_s(self, window: _Window) -> float:
        """The mean step of WINDOW's phase before it opened (0 where not known)."""
        phase = self.phase
        if phase is None or phase[0] != window.key or window.start_n <= phase[1]:
            return 0.0
        return max(0.0, (window.start_wall - phase[2]) / (window.start_n - phase[1]))

    def _ended(self, k: int, elapsed: float, longest: float) -> str | None:
        """Why a step-driven window that has run K steps for ELAPSED seconds (the longest LONGEST)
        closes now, or None. Slow steps close it at the budget: its typical step (the longest, a
        stall such as an epoch's start or a checkpoint, left out) would take the steps asked for
        past the budget, and it holds enough of them; the trace, and the pause its stop costs the
        loop, grow with each traced step."""
        if (k >= self.steps and (elapsed >= self.min_window or k >= self.max_steps)) or elapsed > self.max_window:
            return "steps"
        if self.budget > 0 and k >= max(2, self.min_steps) and elapsed >= self.budget \
                and (elapsed - longest) / (k - 1) * self.steps >= self.budget:
            return "budget"
        return None

    def _phase_key(self, source: StepSource) -> PhaseKey:
        torch = self.torch
        try:
            grad = bool(torch.is_grad_enabled())
        except Exception:  # noqa: BLE001 (grad mode unknown)
            grad = None
        return (source, getattr(self.hooks.tls, "last_loader", None), grad, self.hooks.cuda_initialized())

    def _due(self, key: PhaseKey, settled: bool = True) -> str | None:
        """The label of the window this phase is due, or None (`settled`: past the epoch's warm-up)."""
        if self.taken >= self.max_windows or self.teardown.pending():
            return None  # all taken, or the last one's CUPTI detach may not be done (detach_due)
        if self.taken == 0:
            return "start"
        if key not in self.profiled:
            return "phase"
        if self.later_taken or self.first_end is None or time.time() - self.first_end < self.later_after \
                or not settled:
            return None
        loader = key[1]
        if loader is not None and self.hooks.loader_epochs.get(loader, 0) <= self.profiled[key]:
            return None  # wait for a new epoch of this loader
        return "later"

    # -- windows without steps (armed by the agent's thread) ---------------------
    def poll(self) -> None:
        """On the agent's thread: arm the safe points once a stepless run is due a window."""
        if self.teardown.pending() and self.hooks.steps.active() is None:
            self.teardown.detach_due()  # a stepless run: no step ends the wait
        if self.state != self.IDLE or self.pending is not None or self.safepoints is None:
            return
        if not self.hooks.cuda_initialized():
            return
        now = time.time()
        if self.cuda_seen is None:
            self.cuda_seen = now
        idle = self.hooks.steps.idle_s()
        if self.hooks.steps.active() is not None or (idle is not None and idle < self.no_step_after):
            return
        if now - self.cuda_seen < self.no_step_after:
            return
        if self.hooks.compile_used:
            # no time-bounded window under torch.compile (its safe points are hooks dynamo would
            # see); a step-driven window still comes: the first step of a compiled loop often
            # takes longer than no_step_after, compiling (exit_note says it when none came)
            self.compile_stepless = True
            return
        label = self._due(("time",))
        if label is None:
            return
        self.pending = label
        self.safepoints.arm(self._safe_point)

    def _safe_point(self) -> None:
        """On the main thread, at a hooked call: open or close the time-bounded window."""
        assert self.safepoints is not None  # only the safe points call this
        if self.state == self.IDLE and self.pending is not None:
            label, self.pending = self.pending, None
            if self.hooks.steps.active() is not None or self.hooks.compile_used:
                self.safepoints.disarm()
                return
            self.calls = 0
            self.start("time", 0, label, ("time",))
            if self.state != self.RUNNING:
                self.safepoints.disarm()
        elif self.state == self.RUNNING and self.window is not None and self.window.source == "time":
            self.calls += 1
            if time.time() - self.window.start_wall >= self.time_window or self.calls >= self.time_max_calls:
                self.stop("time")
        else:
            self.pending = None
            self.safepoints.disarm()

    def disarm(self) -> None:
        """torch.compile was called: nothing of ours may stay hooked."""
        self.pending = None
        self._abandon_count()
        if self.safepoints is not None:
            self.safepoints.disarm()

    # -- forks (see the module docstring) --------------------------------------------
    def _abandon_count(self, child: bool = False) -> None:
        """A fork, the hooks' end or torch.compile: the step being counted is not kept. Its thread takes
        the hook off now; another thread leaves that to the counting thread's next boundary (_counted).
        In a forked child the hook was never on its thread (a fork on the counting thread ended it
        first): the state only goes."""
        counting = self.counting
        if counting is None:
            return
        self.counts[counting.key] = None
        if child:
            self.counting = None
        elif counting.thread == threading.get_ident():
            self.counting = None
            counting.end()
        else:
            counting.abandoned = True

    def _before_fork(self) -> None:
        self.forked_inside = False
        if self.counting is not None and self.counting.thread == threading.get_ident():
            self._abandon_count()  # the child would go on counting (its thread keeps the hook)
        window = self.window
        if self.state != self.RUNNING or self.prof is None or window is None:
            return
        if threading.get_ident() == window.thread:
            try:
                self.stop("fork", keep=self._keep_at_fork(window))
            except Exception as exc:  # noqa: BLE001 (the fork goes on; the child switches tracing off)
                self.hooks.agent.error("profiler_fork", exc)
        self.forked_inside = self.state == self.RUNNING

    def _keep_at_fork(self, window: _Window) -> bool:
        """Whether a window a fork closes is kept. A step-driven one, once it saw a whole step (else it is
        taken again later). A time-bounded one, once it ran `profile_min_window_s`: a fork sooner is mostly
        a DataLoader starting its workers, the loop's steps next (as a step would, the fork discards it:
        in 7 of 59 recorded corpus runs such a window held 3-5 ms of the set-up and no GPU work); and
        always after one was discarded so (a stepless run forking often gets no new window per fork)."""
        if window.source != "time":
            return self.hooks.steps.count[window.source] > window.start_n
        if self.time_fork_discarded or time.time() - window.start_wall >= self.min_window:
            return True
        self.time_fork_discarded = True
        return False

    def _after_fork_in_child(self) -> None:
        self.teardown.forked()
        self._abandon_count(child=True)
        if not self.forked_inside:
            return
        self.prof = None  # the parent's window: never stopped or exported here
        self.state = self.DONE
        self.teardown.__exit__(None, None, None)
        untrace_forked_child(self.torch)

    def finish(self) -> None:
        """The hooks finish (the run's exit, or an in-process watch's end): close the window, and
        give TEARDOWN_CUPTI back unless a window traced CUDA (_cupti_teardown.watch_ended)."""
        self._abandon_count()
        self.stop("exit")
        self.teardown.watch_ended()

    def exit_note(self) -> None:
        """At exit: why a compiled run that never stepped got no window."""
        if self.compile_stepless and self.taken == 0 and not any(self.hooks.steps.count.values()):
            self.hooks.agent.emit("profile", error="no step boundaries, and the workload uses torch.compile: no "
                                  "time-bounded window (mark steps with gpudoctor.step())")

    # -- opening and closing ------------------------------------------------------
    def start(self, source: WindowSource, n: int, label: str, key: PhaseKey) -> None:
        if getattr(self.hooks, "finished", False):
            self.state = self.DONE  # hooks already finished (an in-process watch that ended): never reopen
            return
        torch = self.torch
        try:
            if torch.autograd._profiler_enabled():
                self.hooks.agent.emit(
                    "profile", error="the workload runs its own profiler; gpudoctor's window was skipped")
                self.state = self.DONE
                return
        except Exception:  # noqa: BLE001 (a torch without this check: the window starts)
            pass
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
        self.state = self.RUNNING  # set first: never retried if start fails
        self.taken += 1
        self.window = _Window(source, label, n, key, self.taken, ProfilerActivity.CUDA in activities)
        if self.window.thread != MAIN_THREAD and getattr(self.guards, "guard", None) is None:
            self.guards.guard = _ThreadEnd(self)
        self.window.stacks = self._stacks(self.window)
        try:
            prof = profile(activities=activities, record_shapes=False, with_stack=self.window.stacks)
            self.teardown.__enter__()
            with _quiet_kineto(), _no_lazy_inductor(torch):
                prof.start()
            self.prof = prof
            self.window.start_wall = time.time()  # the window begins once tracing runs (starting it takes a while)
        except Exception as exc:  # noqa: BLE001 (no window; the profile event says why)
            self.teardown.__exit__(None, None, None)
            self.state = self.DONE
            self.hooks.agent.emit("profile", error="profiler failed to start: %s: %s" % (type(exc).__name__, exc))

    def stop(self, why: str, keep: bool = True) -> None:
        if self.state != self.RUNNING or self.prof is None:
            return
        window = self.window
        assert window is not None  # RUNNING: start() set it
        if threading.get_ident() != window.thread:
            # e.g. interpreter exit on the main thread while steps ran on a daemon thread: stopping
            # Kineto from a foreign thread is not safe; the window is abandoned instead
            self.state = self.DONE
            self.teardown.__exit__(None, None, None)
            self.hooks.agent.emit("profile", error="the profiler window could not be closed on its own thread")
            return
        if window.source == "time" and self.safepoints is not None:
            self.safepoints.disarm()
        prof, self.prof = self.prof, None
        before = self.teardown.stopping(window.cuda)
        detach: tuple[str, float] | None = None
        if not keep:
            self.taken -= 1
            self.state = self.IDLE
            try:
                prof.stop()
                detach = self._await_detach(before)
            except Exception:  # noqa: BLE001 (the discarded window is abandoned)
                self.state = self.DONE
            _release(prof)
            self.teardown.later(window.cuda, detached=_ended(detach))
            return
        self.state = self.IDLE if self.taken < self.max_windows else self.DONE
        end_wall = time.time()
        fields: Profile = {"source": window.source, "steps": 0, "t_start": window.start_wall, "t_end": end_wall,
                  "why": why, "label": window.label, "index": window.index}
        if window.source != "time":
            fields["steps"] = self.hooks.steps.count[window.source] - window.start_n
            fields["loader"], fields["grad"], fields["cuda"] = window.key[1:4]
        fields["stacks"] = window.stacks
        if window.count is not None and window.predicted_s is not None:
            count = window.count
            fields["counted"] = {"t_start": count.wall, "duration_s": round(count.took, 6), "calls": count.calls,
                                 "stop_predicted_s": round(window.predicted_s, 3)}
        try:
            self._drain(window, prof)
            began = time.perf_counter()
            prof.stop()
            stopped = time.perf_counter()
            detach = self._await_detach(before)
            if detach is not None:
                fields["cupti_detach"], fields["cupti_detach_ms"] = detach[0], round(detach[1], 3)
            path = os.path.join(self.hooks.agent.directory, "trace-%d-%d.json" % (os.getpid(), window.index))
            exporting = time.perf_counter()
            prof.export_chrome_trace(path)
            fields["path"] = os.path.basename(path)
            held = (stopped - began) + (time.perf_counter() - exporting)  # the detach's wait left out
            fields["stop_s"] = round(held, 3)
            if 0 < self.stop_held <= held:
                self.stacks = False
        except Exception as exc:  # noqa: BLE001 (the profile event says why)
            fields["error"] = "profiler failed to stop/export: %s: %s" % (type(exc).__name__, exc)
        _release(prof)
        self.teardown.later(window.cuda, detached=_ended(detach))
        self._record(window, end_wall)
        try:
            matmul = self.torch.backends.cuda.matmul
            fields["tf32"] = bool(matmul.allow_tf32)
            fields["float32_matmul_precision"] = self.torch.get_float32_matmul_precision()
        except Exception:  # noqa: BLE001 (the precision facts are optional)
            pass
        snap = self.hooks.allocator_snapshot("steady")
        if snap:
            self.hooks.agent.emit("alloc", **snap)
        self.hooks.agent.emit("profile", **fields)

    def _drain(self, window: _Window, prof: Any) -> None:
        """Wait for the GPU work queued so far just before torch's stop, which waits for it too (its
        autograd profile synchronizes the device it traced: no wait is added), so the stop's own time,
        the trace's, is timed apart from the workload's queued steps."""
        if not window.cuda or getattr(getattr(prof, "profiler", None), "use_device", None) != "cuda":
            return
        cuda = self.torch.cuda
        try:
            if not cuda.is_current_stream_capturing():  # a synchronize would break a capture
                cuda.synchronize()
        except Exception:  # noqa: BLE001 (torch's stop waits then: its own time is counted with the stop's)
            pass

    def _await_detach(self, before: frozenset[str] | None) -> tuple[str, float] | None:
        """After torch's stop of a window that traced CUDA: Kineto's detach, finalized here (await_detach)."""
        if before is None:
            return None
        return await_detach(before, self._cuda_poke)

    def _cuda_poke(self) -> None:
        """A cheap CUDA runtime call (cudaStreamQuery): where Kineto's pending finalize runs."""
        cuda = self.torch.cuda
        if cuda.is_current_stream_capturing():  # a query would break the capture
            raise RuntimeError("a CUDA graph is being captured")
        cuda.current_stream().query()

    def _record(self, window: _Window, end_wall: float) -> None:
        loader = window.key[1] if len(window.key) > 1 else None
        self.profiled[window.key] = self.hooks.loader_epochs.get(loader, 0) if loader is not None else 0
        if window.label == "later":
            self.later_taken = True
        if self.first_end is None:
            self.first_end = end_wall


def _ended(detach: tuple[str, float] | None) -> bool:
    """A window's CUPTI detach (await_detach) was seen to end."""
    return detach is not None and detach[0] == "ended"


def _release(prof: Any) -> None:
    """Free a stopped window's recorded events now, inside the pause its stop already costs.

    torch.profiler.profile refers to itself (its table of actions holds its bound methods), so
    dropping it leaves the whole window, the recorded events with it, to the cyclic garbage
    collector: one collection, seconds later and outside any window, then spent about a second
    freeing them in the middle of the user's loop (a num_workers=0 loop on CPU: one step of
    0.9-1.1 s about 5 s after the window; none with the collector off). Its autograd profile,
    which holds the events, is not in that cycle and goes at once when let go."""
    try:
        prof.profiler = None
    except Exception:  # noqa: BLE001 (an unknown profiler shape: the collector frees it later)
        pass


def untrace_forked_child(torch: ModuleType) -> None:
    """Switch off, in a child forked inside a window, the tracing it inherited."""
    try:
        sys.setprofile(None)
        threading.setprofile(None)
        if torch.autograd._profiler_enabled():
            from torch.profiler import ProfilerActivity

            torch._C._autograd._toggle_collection_dynamic(False, {ProfilerActivity.CPU})
    except Exception:  # noqa: BLE001 (a child that cannot be cleaned runs on, traced)
        pass


def profiler_inherited(torch: ModuleType) -> bool:
    """True in a process whose torch.profiler state is on though no window of its own runs."""
    try:
        return bool(torch.autograd._profiler_enabled())
    except Exception:  # noqa: BLE001 (unknown: not reported)
        return False
