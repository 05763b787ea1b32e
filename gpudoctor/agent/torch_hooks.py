"""What the agent measures inside torch: DataLoaders, steps, the allocator, CUDA use.

Every wrapper calls the original first-class and records around it; a failure
in our own code is recorded and swallowed, never raised into the workload.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from .cuda_state import allocator_snapshot, report_cuda
from .loaders import LoaderRegistry
from .stats import FetchStats, StepTracker, runqueue_s

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any, TypedDict

    from . import Agent
    from .fetch_profile import FetchProfiler
    from .profiler import ProfilerWindow
    from .protocol import AllocatorSnapshot, StepSource
    from .safepoints import SafePoints
    from .step_sources import StepSources

    # torch's OOM observer: (device, bytes asked for, bytes allocated on the device, bytes free)
    OomObserver = Callable[[int, int, int, int], None]

    class _WorkerHello(TypedDict, total=False):
        """What a worker's "hello" may add to what every worker's says."""

        profiler_inherited: bool

_perf = time.perf_counter
_cpu = time.thread_time


class TorchHooks:
    def __init__(self, agent: Agent, torch: ModuleType) -> None:
        self.agent = agent
        self.torch = torch
        self.steps = StepTracker(self)
        self.fetch = FetchStats()
        self.tls = threading.local()
        self.loaders = LoaderRegistry(self)  # the DataLoaders seen, and their ids
        # loader_id -> [batches, wait_total, wait_max, iterators created, seconds creating them]
        self.loader_stats: dict[str | None, list[float]] = {}
        self.loader_lock = threading.Lock()
        self.loader_dirty = False
        self.cuda_reported: tuple[str | None, ...] | None = None  # the uuids of the devices last sent
        self.last_alloc_t = 0.0
        self.profiler: ProfilerWindow | None = None
        self.finished = False
        self.worker_pid: int | None = None
        self.compile_used = False  # torch.compile was called (the profiler window keeps out of its way)
        self.loader_epochs: dict[str, int] = {}  # loader id -> iterators created (epochs)
        self.sources: StepSources | None = None  # backward and forward step sources (step_sources.py)
        self.safepoints: SafePoints | None = None  # calls that open a window in a stepless run (safepoints.py)
        self.fetch_profiler: FetchProfiler | None = None  # where a loader worker spends its time (fetch_profile.py)
        self.dist_reported = False  # the torch.distributed rank was sent ("dist")
        # torch's attach function and our observer, until CUDA is up (declared, set by _attach_oom_observer)
        self._pending_oom_observer: tuple[Callable[[OomObserver], None], OomObserver] | None

    # -- installation ----------------------------------------------------------
    def install(self) -> None:
        agent = self.agent
        for name, fn in (("dataloader", self._patch_dataloader), ("fetchers", self._patch_fetchers),
                         ("optimizer", self._patch_optimizer), ("oom_observer", self._attach_oom_observer),
                         ("compile", self._watch_compile), ("step_sources", self._install_sources)):
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 (each hook is optional; reported)
                agent.error(name, exc)
        try:
            import atexit

            # registered after torch's own exit handlers, so it runs before them: a window
            # still open at exit is exported while torch is whole
            atexit.register(self.finish)
        except Exception as exc:  # noqa: BLE001 (no export at exit; reported)
            agent.error("atexit", exc)
        try:
            from .profiler import ProfilerWindow

            if agent.config.get("profile", True):
                self.profiler = ProfilerWindow(self)
        except Exception as exc:  # noqa: BLE001 (no profiler windows; reported)
            agent.error("profiler_init", exc)
        agent.writer.add_periodic(self.periodic)
        agent.emit("torch", version=getattr(self.torch, "__version__", None),
                   cuda=getattr(getattr(self.torch, "version", None), "cuda", None))

    def _install_sources(self) -> None:
        from .fetch_profile import FetchProfiler
        from .safepoints import SafePoints
        from .step_sources import StepSources

        self.safepoints = SafePoints(self.torch, self.agent)
        self.sources = StepSources(self)
        self.sources.install()
        if self.agent.config.get("fetch_profile", True):
            self.fetch_profiler = FetchProfiler(self)

    def _patch_dataloader(self) -> None:
        from torch.utils.data import dataloader as dl

        hooks = self
        base = dl._BaseDataLoaderIter
        orig_init = base.__init__
        orig_next = base.__next__
        orig_get_iterator = dl.DataLoader._get_iterator

        def _get_iterator(self_loader):  # type: (Any) -> Any
            # creating an iterator starts its workers (each epoch, unless persistent_workers): main-thread
            # time between steps that no __next__ holds; a persistent-workers loader creates one
            t0 = _perf()
            it = orig_get_iterator(self_loader)
            try:
                hooks._on_iterator(getattr(it, "_gpudoctor_id", None), _perf() - t0)
            except Exception as exc:  # noqa: BLE001 (the iterator is returned as it is)
                hooks.agent.error("loader_iterator", exc)
            return it

        def __init__(self_iter, loader, *args, **kwargs):  # type: (Any, Any, *Any, **Any) -> None
            orig_init(self_iter, loader, *args, **kwargs)
            try:
                hooks._on_iter(self_iter, loader)
            except Exception as exc:  # noqa: BLE001 (the workload's iterator, unobserved)
                hooks.agent.error("loader_init", exc)

        def __next__(self_iter):  # type: (Any) -> Any
            if getattr(self_iter, "_gpudoctor_owner", None) is not hooks.loaders.token:
                try:
                    hooks._adopt(self_iter)
                except Exception as exc:  # noqa: BLE001 (the iterator stays unobserved)
                    hooks.agent.error("loader_adopt", exc)
            loader_id = getattr(self_iter, "_gpudoctor_id", None)
            previous = getattr(hooks.tls, "loader", None)
            hooks.tls.loader = loader_id
            t0 = _perf()
            try:
                batch = orig_next(self_iter)
            except StopIteration:
                hooks.tls.loader = previous
                raise
            except BaseException:
                hooks.tls.loader = previous
                raise
            waited = _perf() - t0
            hooks.tls.loader = previous
            try:
                # False only on an iterator marked with its id (loaders.LoaderRegistry._mark)
                if getattr(self_iter, "_gpudoctor_workers_sent", True) is False and loader_id is not None:
                    hooks._send_workers(self_iter, loader_id)
                hooks._on_batch(loader_id, waited)
            except Exception as exc:  # noqa: BLE001 (the batch is returned as it is)
                hooks.agent.error("loader_next", exc)
            return batch

        for fn, orig in ((__init__, orig_init), (__next__, orig_next), (_get_iterator, orig_get_iterator)):
            fn.__wrapped__ = orig  # type: ignore[union-attr]  # functools' marker, set on a plain function
            fn.__name__ = orig.__name__
            fn.__qualname__ = orig.__qualname__
            fn.__doc__ = orig.__doc__
        base.__init__ = __init__  # type: ignore[method-assign,assignment]  # patching torch's iterator class
        base.__next__ = __next__  # type: ignore[method-assign,assignment]
        dl.DataLoader._get_iterator = _get_iterator  # type: ignore[method-assign,assignment]

    def _patch_fetchers(self) -> None:
        from torch.utils.data._utils import fetch as fetch_mod

        hooks = self
        for cls in (fetch_mod._MapDatasetFetcher, fetch_mod._IterableDatasetFetcher):
            orig = cls.fetch

            def make(orig: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
                def fetch(self_fetcher, possibly_batched_index):  # type: (Any, Any) -> Any
                    profiler = hooks.fetch_profiler
                    profiling = profiler is not None and profiler.begin()
                    stats = hooks.fetch
                    loader = getattr(hooks.tls, "loader", None)
                    read = stats.reading(loader)  # CPU and run-queue time on a sample of the batches (FetchStats)
                    if read:  # the clocks interleaved, each interval holding one read of the other
                        r0 = runqueue_s()
                        w0 = _perf()
                        c0 = _cpu()
                    else:
                        w0 = _perf()
                    try:
                        result = orig(self_fetcher, possibly_batched_index)
                    finally:
                        if profiling and profiler is not None:  # profiling implies a profiler
                            profiler.end(_perf() - w0)
                    try:
                        w1 = _perf()
                        if read:
                            cpu = _cpu() - c0
                            r1 = runqueue_s() if r0 is not None else None
                            weight = stats.read(loader, w0)
                            hooks._on_fetch(w1 - w0, cpu, r1 - r0 if r1 is not None and r0 is not None else None,
                                            weight)
                        else:
                            hooks._on_fetch(w1 - w0, None, None)
                    except Exception as exc:  # noqa: BLE001 (the fetched batch is returned as it is)
                        hooks.agent.error("fetch", exc)
                    return result

                fetch.__wrapped__ = orig  # type: ignore[attr-defined]  # functools' marker
                fetch.__name__ = orig.__name__
                fetch.__qualname__ = orig.__qualname__
                return fetch

            cls.fetch = make(orig)  # type: ignore[method-assign]  # patching torch's fetcher classes

    def _watch_compile(self) -> None:
        """Note that torch.compile was called (Module.compile calls it too); it behaves as before."""
        import functools

        torch = self.torch
        original = torch.compile
        hooks = self

        @functools.wraps(original)
        def compile(*args, **kwargs):  # type: (*Any, **Any) -> Any
            hooks.compile_used = True
            hooks._unhook()  # before dynamo first traces: nothing of ours may be in what it sees
            return original(*args, **kwargs)

        torch.compile = compile  # type: ignore[attr-defined]  # patching the torch module

    def _unhook(self) -> None:
        try:
            if self.sources is not None:
                self.sources.remove()
            if self.profiler is not None:
                self.profiler.disarm()
            elif self.safepoints is not None:
                self.safepoints.disarm()
        except Exception as exc:  # noqa: BLE001 (unhooking is best effort; reported)
            self.agent.error("unhook", exc)

    def _patch_optimizer(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        hooks = self

        def post_step(optimizer, args, kwargs):  # type: (Any, Any, Any) -> None
            try:
                hooks.steps.boundary("optimizer")
            except Exception as exc:  # noqa: BLE001 (the optimizer step is unaffected)
                hooks.agent.error("optimizer_step", exc)

        register_optimizer_step_post_hook(post_step)

    def _attach_oom_observer(self) -> None:
        C = self.torch._C
        attach = getattr(C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return
        hooks = self

        def observer(device, alloc, device_allocated, device_free):  # type: (int, int, int, int) -> None
            try:
                hooks.agent.emit("oom_observed", device=device, request_bytes=alloc,
                                 device_allocated=device_allocated, device_free=device_free,
                                 allocator=hooks.allocator_snapshot("oom"))
                hooks.agent.writer.flush()
            except Exception:  # noqa: BLE001 (an OOM observer never raises into the allocator)
                pass

        # attached once the workload has initialised CUDA itself (see _report_cuda)
        self._pending_oom_observer = (attach, observer)

    # -- events ----------------------------------------------------------------
    def _on_iter(self, it: Any, loader: Any) -> None:
        self.loaders.register(it, loader)

    def _adopt(self, it: Any) -> None:
        self.loaders.adopt(it)

    def _send_workers(self, it: Any, loader_id: str) -> None:
        self.loaders.send_workers(it, loader_id)

    def _loader_entry(self, loader_id: str | None) -> list[float]:
        """The loader's cumulative numbers (see loader_stats), under loader_lock."""
        return self.loader_stats.setdefault(loader_id, [0, 0.0, 0.0, 0, 0.0])

    def _on_iterator(self, loader_id: str | None, seconds: float) -> None:
        with self.loader_lock:
            stats = self._loader_entry(loader_id)
            stats[3] += 1
            stats[4] += seconds
            self.loader_dirty = True

    def _on_batch(self, loader_id: str | None, waited: float) -> None:
        with self.loader_lock:
            stats = self._loader_entry(loader_id)
            stats[0] += 1
            stats[1] += waited
            stats[2] = max(stats[2], waited)
            self.loader_dirty = True
        self.tls.last_loader = loader_id  # the phase of this thread's steps (profiler.py)
        self.steps.add_wait(waited)
        self.steps.boundary("loader")

    def _on_fetch(self, wall: float, cpu: float | None, runqueue: float | None, weight: float = 1.0) -> None:
        key = getattr(self.tls, "loader", None)
        if key is None:
            info = self.torch.utils.data.get_worker_info()
            key = "worker:%d" % info.id if info is not None else "unknown"
            if info is not None and self.worker_pid != os.getpid():
                self._enter_worker()
        self.fetch.add(key, wall, cpu, runqueue, weight)

    def _enter_worker(self) -> None:
        """First batch in a DataLoader worker: make sure its numbers reach the disk.

        Workers end through os._exit (no atexit), so flush from multiprocessing's
        own finalizers, which do run when a worker leaves its loop.
        """
        self.worker_pid = os.getpid()
        # state copied from the parent by fork belongs to the parent
        self.fetch = FetchStats()
        self.steps = StepTracker(self)
        # a new lock, not the parent's: a fork while the parent's flusher thread held it (emitting
        # loader_stats) leaves the copy locked for good in the child, and taking it would hang the worker
        self.loader_lock = threading.Lock()
        self.loader_stats = {}
        self.loader_dirty = False
        self.profiler = None
        self._unhook()  # a spawned worker installed its own: its transforms are not steps
        from .profiler import profiler_inherited

        extra: _WorkerHello = {"profiler_inherited": True} if profiler_inherited(self.torch) else {}
        self.agent.emit("hello", pid=os.getpid(), ppid=os.getppid(), role="worker", argv=[], **extra)
        self.agent.writer.ensure_running()
        try:
            from multiprocessing import util

            util.Finalize(None, self._worker_exit, exitpriority=100)
        except Exception as exc:  # noqa: BLE001 (no flush at worker exit; reported)
            self.agent.error("worker_finalize", exc)

    def _worker_exit(self) -> None:
        self._finish_fetch_profile()
        self.steps.flush()
        fetch = self.fetch.snapshot()
        if fetch:
            self.agent.emit("fetch", stats=fetch)
        self.agent.writer.flush(force=True)

    def _finish_fetch_profile(self) -> None:
        if self.fetch_profiler is not None:
            self.fetch_profiler.finish()  # never raises: reports its own error

    def on_step(self, source: StepSource, n: int) -> None:
        # a short job may destroy its process group before the next flush; groups are joined
        # before the loop, so the first steps (and then every 100th) are enough to look
        if not self.dist_reported and (n <= 5 or n % 100 == 0):
            self._report_dist()
        sources = self.sources
        if sources is not None:
            sources.on_step(source)
        profiler = self.profiler
        if profiler is not None:
            try:
                profiler.on_step(source, n)
            except Exception as exc:  # noqa: BLE001 (the profiler is dropped, the step goes on)
                self.agent.error("profiler_step", exc)
                self.profiler = None

    # -- periodic (flusher thread) ----------------------------------------------
    def periodic(self) -> None:
        self.steps.flush()
        fetch = self.fetch.snapshot()
        if fetch:
            self.agent.emit("fetch", stats=fetch)
        with self.loader_lock:
            if self.loader_dirty:
                self.loader_dirty = False
                self.agent.emit("loader_stats", stats={k: [v[0], round(v[1], 6), round(v[2], 6), v[3], round(v[4], 6)]
                                                       for k, v in self.loader_stats.items()})
        if self._in_worker():
            return
        self._report_cuda()
        self._report_dist()
        if self.finished:
            return  # exiting: nothing new is hooked or armed
        try:
            if self.sources is not None:
                self.sources.poll()
            if self.fetch_profiler is not None:
                self.fetch_profiler.poll()
        except Exception as exc:  # noqa: BLE001 (polled again next interval; reported)
            self.agent.error("sources_poll", exc)
        profiler = self.profiler
        if profiler is not None:
            try:
                profiler.poll()
            except Exception as exc:  # noqa: BLE001 (polled again next interval; reported)
                self.agent.error("profiler_poll", exc)

    def _in_worker(self) -> bool:
        try:
            return self.torch.utils.data.get_worker_info() is not None
        except Exception:  # noqa: BLE001 (unknown: not a worker)
            return False

    def cuda_initialized(self) -> bool:
        try:
            # is_initialized() is a flag: it never starts CUDA on the workload's behalf
            return bool(self.torch.cuda.is_initialized())
        except Exception:  # noqa: BLE001 (unknown: CUDA not started)
            return False

    def _report_cuda(self) -> None:
        report_cuda(self)

    def _report_dist(self) -> None:
        """The rank of this process once it joined a process group (init_process_group).
        Read, never imported: a launcher (torchrun) or a one-GPU script never pays for it,
        and torchrun's launcher never joins a group, so it never claims a rank."""
        if self.dist_reported:
            return
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return
            self.dist_reported = True
            self.agent.emit("dist", rank=int(dist.get_rank()), world_size=int(dist.get_world_size()),
                            backend=str(dist.get_backend()))
        except Exception as exc:  # noqa: BLE001 (no rank facts; reported)
            self.dist_reported = True
            self.agent.error("dist", exc)

    def allocator_snapshot(self, label: str) -> AllocatorSnapshot | None:
        """A compact copy of torch.cuda.memory_stats() for the current device."""
        return allocator_snapshot(self, label)

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        try:
            self.steps.flush()
            self.periodic()
        except Exception as exc:  # noqa: BLE001 (exit goes on; reported)
            self.agent.error("finish", exc)
        if self.profiler is not None:
            try:
                self.profiler.finish()
                self.profiler.exit_note()
            except Exception as exc:  # noqa: BLE001 (exit goes on; reported)
                self.agent.error("profiler_stop", exc)
        self._finish_fetch_profile()
        if not self._in_worker():
            snap = self.allocator_snapshot("end")
            if snap:
                self.agent.emit("alloc", **snap)
