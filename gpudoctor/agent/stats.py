"""Per-process counters of the agent: step boundaries and what producing batches cost."""

from __future__ import annotations

import math
import os
import random
import threading
import time
import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .protocol import Step, StepSource
    from .torch_hooks import TorchHooks

    # (source, its step count, seconds since its previous step, data wait, backward, time.time())
    StepRecord = tuple[StepSource, int, float, float, float, float]

_perf = time.perf_counter
_wall = time.time
_TRACKERS: weakref.WeakSet[StepTracker] = weakref.WeakSet()  # the process's trackers, seen at each fork
_FETCH_STATS: weakref.WeakSet[FetchStats] = weakref.WeakSet()
_FORK_HANDLER: list[bool] = []  # registered once per process


def _register_fork_handler() -> None:
    if not _FORK_HANDLER:
        _FORK_HANDLER.append(True)
        try:
            os.register_at_fork(after_in_child=_after_fork_in_child)
        except (AttributeError, ValueError):  # no fork on this platform
            pass


def _after_fork_in_child() -> None:
    for fetch in list(_FETCH_STATS):
        fetch.plans.clear()  # a child's first batch of each loader is read (its own numbers start there)
    for tracker in list(_TRACKERS):
        tracker.forked()


class _SchedStat:
    """This thread's /proc schedstat, opened once: each fetch reads it twice, and opening it every
    time cost 9.4 us a read against 1.2 us re-read in place (CPU VM), on the loop's thread when
    num_workers=0. The file names the thread that opened it (also in a forked child: reopened
    there); closed when its thread ends."""

    __slots__ = ("fd", "pid")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pid = os.getpid()

    @classmethod
    def open(cls) -> _SchedStat:
        # opened before the object exists: a failed open leaves no half-made object to finalise
        return cls(os.open("/proc/thread-self/schedstat", os.O_RDONLY))  # not inherited by exec'd children

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except Exception:  # noqa: BLE001 (a finalizer in the user's process never raises)
            pass


_schedstat = threading.local()
_SCHEDSTAT_MISSING: list[bool] = []  # set once where the file cannot be opened (not Linux)


def runqueue_s() -> float | None:
    """Seconds this thread has waited for a CPU (Linux schedstat), None elsewhere.

    Wall time = CPU time + time waiting for a CPU + time blocked (I/O, sleep, locks).
    Without this, a CPU-bound worker on an oversubscribed machine looks "idle".
    """
    if _SCHEDSTAT_MISSING:
        return None
    try:
        stat = getattr(_schedstat, "stat", None)
        if stat is None or stat.pid != os.getpid():
            stat = _schedstat.stat = _SchedStat.open()
        return int(os.pread(stat.fd, 256, 0).split()[1]) / 1e9
    except FileNotFoundError:
        _SCHEDSTAT_MISSING.append(True)
        return None
    except (OSError, ValueError, IndexError, AttributeError):  # AttributeError: no os.pread
        return None

_ROOT_ATTRS = ("root", "root_dir", "data_dir", "data_root", "dataset_dir", "path", "data_path",
               "img_dir", "image_dir", "images_dir", "directory", "folder")


class StepTracker:
    """Step boundaries per source, with the data wait inside each.

    Sources, by precedence (the first one active names the run's steps):
    explicit (gpudoctor.step()) > optimizer (optimizer.step()) > backward (an outermost
    backward() call) > loader (a DataLoader batch) > forward (the outermost module
    forward on its thread). An explicit mark is the user's own word; one optimizer step
    is one iteration even with gradient accumulation (several backward calls); a
    backward call is one iteration of a loop with no optimizer, and several batches may
    feed it; a batch is one iteration of an evaluation or inference loop; a module
    forward is all an inference loop without a loader shows.
    """

    SOURCES: tuple[StepSource, ...] = ("explicit", "optimizer", "backward", "loader", "forward")
    STALE_MIN_S = 2.0  # a source is no longer active after max(this, STALE_STEPS x its last step)
    STALE_STEPS = 5.0

    def __init__(self, hooks: TorchHooks) -> None:
        self.hooks = hooks
        self.lock = threading.Lock()
        self.last: dict[StepSource, float | None] = dict.fromkeys(self.SOURCES)
        self.last_duration: dict[StepSource, float] = dict.fromkeys(self.SOURCES, 0.0)
        self.pending_wait: dict[StepSource, float] = dict.fromkeys(self.SOURCES, 0.0)
        self.pending_backward: dict[StepSource, float] = dict.fromkeys(self.SOURCES, 0.0)  # in outermost backward()
        self.count: dict[StepSource, int] = dict.fromkeys(self.SOURCES, 0)
        self.agg: dict[StepSource, list[Any]] = {s: [0, 0.0, 0.0] for s in self.SOURCES}  # [n: int, duration, wait]
        self.max_events: int = hooks.agent.config.get("step_events_max", 2000)
        self.last_any: float | None = None  # perf_counter of the latest boundary of any source
        # Steps not yet written. A step event costs the stepping thread nothing but a tuple:
        # the agent's thread turns them into events (flush), as it does the aggregates. Written
        # at once from the stepping thread, two events a step (backward and optimizer) cost a
        # host-bound torch.compile loop 6 us a step there and 31 us on the agent's thread
        # (2-core CPU VM), all of it holding the GIL the loop waits for.
        self.records: list[StepRecord] = []
        # the next step is written at once: the first one in a process (a forked child's
        # included) starts the agent's thread there, which then writes the others
        self.write_next = True
        _TRACKERS.add(self)
        _register_fork_handler()

    def add_wait(self, seconds: float) -> None:
        with self.lock:
            for s in self.SOURCES:
                self.pending_wait[s] += seconds

    def add_backward(self, seconds: float) -> None:
        with self.lock:
            for s in self.SOURCES:
                self.pending_backward[s] += seconds

    def active(self, now: float | None = None) -> StepSource | None:
        """The highest-precedence source that marked a step lately, else None."""
        now = _perf() if now is None else now
        for source in self.SOURCES:
            last = self.last[source]
            if last is not None and now - last <= max(self.STALE_MIN_S, self.STALE_STEPS * self.last_duration[source]):
                return source
        return None

    def idle_s(self, now: float | None = None) -> float | None:
        """Seconds since the latest boundary of any source (None: never one)."""
        if self.last_any is None:
            return None
        return (_perf() if now is None else now) - self.last_any

    def boundary(self, source: StepSource) -> None:
        now = _perf()
        at_once: StepRecord | None = None
        with self.lock:
            last = self.last[source]
            self.last[source] = self.last_any = now
            wait = self.pending_wait[source]
            self.pending_wait[source] = 0.0
            backward = self.pending_backward[source]
            self.pending_backward[source] = 0.0
            self.count[source] += 1
            n = self.count[source]
            if last is not None:
                duration = now - last
                self.last_duration[source] = duration
                if n <= self.max_events:
                    record = (source, n, duration, wait, backward, _wall())
                    if self.write_next:
                        self.write_next = False
                        at_once = record
                    else:
                        self.records.append(record)
                else:
                    a = self.agg[source]
                    a[0] += 1
                    a[1] += duration
                    a[2] += wait
        if at_once is not None:
            self._emit([at_once])
        self.hooks.on_step(source, n)

    def flush(self) -> None:
        """Write the steps recorded since the last flush, then the aggregates (the agent's
        thread, every flush interval; and at exit)."""
        with self.lock:
            records, self.records = self.records, []
        self._emit(records)
        for source in self.SOURCES:
            with self.lock:
                n, dur, wait = self.agg[source]
                self.agg[source] = [0, 0.0, 0.0]
                total = self.count[source]
            if n:
                self.hooks.agent.emit("steps_agg", src=source, n=n, dur=round(dur, 6), wait=round(wait, 6), total=total)

    def forked(self) -> None:
        """In a forked child: the steps not yet written are the parent's (the parent writes them)."""
        self.lock = threading.Lock()  # one the parent's agent thread held at the fork stays held
        self.records = []
        self.write_next = True

    def _emit(self, records: list[StepRecord]) -> None:
        if not records:
            return
        steps: list[tuple[float, Step]] = []
        for source, n, duration, wait, backward, ts in records:
            if backward:
                steps.append((ts, {"src": source, "n": n, "dur": round(duration, 6), "wait": round(wait, 6),
                                   "bwd": round(backward, 6)}))
            else:
                steps.append((ts, {"src": source, "n": n, "dur": round(duration, 6), "wait": round(wait, 6)}))
        self.hooks.agent.emit_steps(steps)


class FetchStats:
    """What producing batches cost, in this process (a worker, or the main process).

    Every batch's wall time counts; its CPU and run-queue time are read on a random sample of the
    batches. Each reading is two system calls on either side of the fetch (the thread's CPU clock and
    its schedstat file), which cost nothing much on their own (0.24 and 0.36 us in a tight loop, CPU
    VM) but made a `num_workers=0` loop of 185 us steps 14 us a step slower there, every batch
    (median of 3 alternated runs: 220 us with them against 206 without).

    Each batch of a loader is read with a probability p, about one read each SAMPLE_EVERY_S (p = the
    loader's time between batches over it, at most 1: every batch of a loader slower than that), drawn
    as the number of batches to skip until the next read (geometric), so the choice never locks onto a
    period of the loader's own (a slow batch every tenth one, read every tenth batch or never). A read
    counts 1/p times (Horvitz-Thompson): the CPU and run queue of the read batches, over their wall
    time so weighted, stand for all the wall time. One read each 10 ms costs such a loop about 0.1%
    and gives a loader 100 a second: a 6 s loop of 1 ms batches with a 10 ms storage read every tenth
    (CPU over wall 0.45) is estimated within 0.03 (one standard deviation, 200 simulated runs; 0.04 at
    one read each 20 ms). The loop's thread pays a countdown a batch.
    """

    SAMPLE_EVERY_S = 0.01

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # key -> [batches, wall, the read batches' weighted wall, CPU, run queue, batches read, those
        #         with a run queue]
        self.by_key: dict[str, list[float]] = {}
        self.dirty = False
        # the thread's loader (None in a worker) -> [batches left until the next read, the probability
        # a batch is read, perf_counter of the last read's start, batches between it and the one before]
        self.plans: dict[str | None, list[float]] = {}
        self.random = random.Random()  # never the workload's own random state
        _FETCH_STATS.add(self)
        _register_fork_handler()

    def reading(self, loader: str | None) -> bool:
        """Before a fetch: whether this batch's CPU and run queue are to be read."""
        plan = self.plans.get(loader)
        if plan is None:
            return True  # a loader's first batch
        plan[0] -= 1
        return plan[0] <= 0

    def read(self, loader: str | None, began: float) -> float:
        """After a read fetch that began at `began` (perf_counter): plan the next read; the weight of this one."""
        plan = self.plans.get(loader)
        weight = 1.0 / plan[1] if plan is not None else 1.0
        p = 1.0
        if plan is not None and began > plan[2]:
            p = min(1.0, (began - plan[2]) / plan[3] / self.SAMPLE_EVERY_S)
        skip = 1
        if p < 1.0:  # batches until the next read: geometric with mean 1/p
            skip += int(math.log(1.0 - self.random.random()) / math.log(1.0 - p))
        self.plans[loader] = [skip, p, began, skip]
        return weight

    def add(self, key: str, wall: float, cpu: float | None, runqueue: float | None, weight: float = 1.0) -> None:
        """One batch: `cpu` None where it was not read (then its run queue is not either); a read one
        counts `weight` times."""
        with self.lock:
            entry = self.by_key.get(key)
            if entry is None:
                entry = self.by_key[key] = [0, 0.0, 0.0, 0.0, 0.0, 0, 0]
            entry[0] += 1
            entry[1] += wall
            if cpu is not None:
                entry[2] += wall * weight
                entry[3] += cpu * weight
                entry[5] += 1
                if runqueue is not None:
                    entry[4] += runqueue * weight
                    entry[6] += 1
            self.dirty = True

    def snapshot(self) -> dict[str, list[float | None]] | None:
        """key -> [batches, wall, CPU, run queue (None unless every batch read had one)]."""
        with self.lock:
            if not self.dirty:
                return None
            self.dirty = False
            return {k: _estimate(v) for k, v in self.by_key.items()}


def _estimate(v: list[float]) -> list[float | None]:
    batches, wall, read_wall, cpu, runqueue, read, with_runqueue = v
    # the read batches' share of CPU and run queue in their (weighted) wall time, over all the wall time;
    # every loader's first batch in a process is read, so an entry has a read
    scale = wall / read_wall if read_wall > 0 else 1.0
    return [batches, round(wall, 6), round(cpu * scale, 6),
            round(runqueue * scale, 6) if read and with_runqueue == read else None]
