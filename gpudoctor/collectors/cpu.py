"""CPU sampling of the workload's process tree with psutil, and the cores it may use.

Usable cores are what the workload can really run on: its CPU affinity mask and
its cgroup CPU quota (containers, Slurm, Kubernetes limits), not os.cpu_count().
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from gpudoctor.session import CpuInfo, CpuSample

log = logging.getLogger(__name__)


def cgroup_quota_cores(pid: int | None = None, root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The tightest CPU quota (in cores) on the process's cgroup path, None when unlimited."""
    try:
        lines = Path(f"/proc/{pid or 'self'}/cgroup").read_text().splitlines()
    except OSError:
        return None
    best: float | None = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":  # cgroup v2
            candidates = [root / rel.lstrip("/")]
            quota_of = _v2_quota
        elif "cpu" in controllers.split(","):
            base = next((root / d for d in ("cpu,cpuacct", "cpu", "cpuacct,cpu") if (root / d).exists()), None)
            if base is None:
                continue
            candidates = [base / rel.lstrip("/")]
            quota_of = _v1_quota
        else:
            continue
        directory = candidates[0]
        while True:  # a parent's limit binds the children too
            quota = quota_of(directory)
            if quota is not None:
                best = quota if best is None else min(best, quota)
            if directory == root or directory.parent == directory or root not in directory.parents:
                break
            directory = directory.parent
    return best


def _v2_quota(directory: Path) -> float | None:
    try:
        text = (directory / "cpu.max").read_text().split()
    except OSError:
        return None
    if len(text) != 2 or text[0] == "max":
        return None
    try:
        return int(text[0]) / int(text[1])
    except (ValueError, ZeroDivisionError):
        return None


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def cpu_info(pid: int | None = None) -> CpuInfo:
    info = CpuInfo(logical_cores=psutil.cpu_count(logical=True), physical_cores=psutil.cpu_count(logical=False))
    try:
        info.affinity_cores = len(os.sched_getaffinity(pid or 0))
    except (AttributeError, OSError):
        info.affinity_cores = info.logical_cores
    info.cgroup_quota_cores = cgroup_quota_cores(pid)
    limits = [v for v in (info.affinity_cores, info.cgroup_quota_cores) if v]
    info.usable_cores = min(limits) if limits else info.logical_cores
    info.model = _cpu_model()
    return info


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


MAX_SAMPLES = 7200  # one hour at the default 0.5 s; beyond, samples are merged pairwise


class CpuSampler:
    """Samples the process tree rooted at `root_pid` every `interval_s` in a thread.

    `main_pid()` and `worker_pids()` come from the agents' events (which process runs
    the training loop, which ones are DataLoader workers); they may change over time.
    Beyond `max_samples`, samples are merged pairwise and each kept sample stands for
    twice as long (`effective_interval_s`), so a run of any length stays bounded in
    memory and in the Session (the NVML sampler does the same).
    """

    def __init__(
        self,
        root_pid: int,
        t0: float,
        interval_s: float = 0.5,
        main_pid: Callable[[], int | None] = lambda: None,
        worker_pids: Callable[[], set[int]] = set,
        max_samples: int = MAX_SAMPLES,
    ) -> None:
        self.root_pid = root_pid
        self.max_samples = max(2, max_samples)
        self.stride = 1  # raw samples per kept sample
        self._pending: list[CpuSample] = []
        self.t0 = t0
        self.interval_s = interval_s
        self.main_pid = main_pid
        self.worker_pids = worker_pids
        self.samples: list[CpuSample] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpudoctor-cpu", daemon=True)
        self._procs: dict[int, psutil.Process] = {}
        self._last_cpu: dict[int, float] = {}
        self._last_thread: tuple[int, float] | None = None
        self._last_t: float | None = None
        self._cores: list[int] | None = None

    def start(self) -> None:
        try:
            self._cores = sorted(os.sched_getaffinity(self.root_pid))
        except (AttributeError, OSError):
            self._cores = None
        psutil.cpu_percent(percpu=True)  # prime the system-wide deltas
        psutil.cpu_times_percent()
        self._thread.start()

    def stop(self) -> list[CpuSample]:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=5)
        if self._pending and not self._thread.is_alive():
            tail = merge_samples(self._pending)
            if len(self.samples) >= self.max_samples:  # at the bound: fold into the last one
                tail = merge_samples([self.samples.pop(), tail])
            self.samples.append(tail)
            self._pending = []
        return self.samples

    @property
    def effective_interval_s(self) -> float:
        """The time one kept sample stands for (grows as long runs are thinned)."""
        return self.interval_s * self.stride

    def keep(self, sample: CpuSample) -> None:
        """Append, merging raw samples `stride` at a time once the bound was reached."""
        self._pending.append(sample)
        if len(self._pending) >= self.stride:
            self.samples.append(merge_samples(self._pending))
            self._pending = []
        if len(self.samples) > self.max_samples:
            self.samples = [merge_samples(self.samples[i : i + 2]) for i in range(0, len(self.samples), 2)]
            self.stride *= 2

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                sample = self.sample()
                if sample is not None:
                    self.keep(sample)
            except Exception as exc:  # never let sampling take the supervisor down
                self.error = f"{type(exc).__name__}: {exc}"
                log.debug("cpu sampling failed", exc_info=True)

    def _tree(self) -> list[psutil.Process]:
        try:
            root = self._procs.get(self.root_pid) or psutil.Process(self.root_pid)
            self._procs[self.root_pid] = root
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        out = []
        for proc in procs:
            cached = self._procs.get(proc.pid)
            if cached is None or cached.create_time() != proc.create_time():
                self._procs[proc.pid] = proc
                cached = proc
            out.append(cached)
        return out

    def sample(self) -> CpuSample | None:
        now = time.time()
        elapsed = now - self._last_t if self._last_t else None
        self._last_t = now
        per_core_all = psutil.cpu_percent(percpu=True)
        per_core = [per_core_all[i] for i in self._cores if i < len(per_core_all)] if self._cores else per_core_all
        times = psutil.cpu_times_percent()
        tree_percent = 0.0
        workers_percent = 0.0
        main_percent = None
        rss = 0
        workers = self.worker_pids()
        main = self.main_pid()
        for proc in self._tree():
            try:
                with proc.oneshot():
                    cpu = proc.cpu_times()
                    total = cpu.user + cpu.system
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
            previous = self._last_cpu.get(proc.pid)
            self._last_cpu[proc.pid] = total
            if previous is None or not elapsed:
                continue
            percent = max(0.0, (total - previous) / elapsed * 100)
            tree_percent += percent
            if proc.pid in workers:
                workers_percent += percent
            if proc.pid == main:
                main_percent = percent
        main_thread = self._main_thread_percent(main, elapsed)
        if elapsed is None:
            return None
        return CpuSample(
            t=round(now - self.t0, 3),
            system_percent=round(sum(per_core) / len(per_core), 1) if per_core else 0.0,
            per_core_percent=[round(p, 1) for p in per_core],
            tree_percent=round(tree_percent, 1),
            main_percent=round(main_percent, 1) if main_percent is not None else None,
            main_thread_percent=main_thread,
            workers_percent=round(workers_percent, 1) if workers else None,
            tree_rss_bytes=rss or None,
            iowait_percent=getattr(times, "iowait", None),
        )

    def _main_thread_percent(self, main: int | None, elapsed: float | None) -> float | None:
        if main is None:
            return None
        try:
            threads = self._procs.get(main) or psutil.Process(main)
            thread = next((t for t in threads.threads() if t.id == main), None)
        except psutil.Error:
            return None
        if thread is None:
            return None
        total = thread.user_time + thread.system_time
        previous = self._last_thread
        self._last_thread = (main, total)
        if previous is None or previous[0] != main or not elapsed:
            return None
        percent: float = round(max(0.0, (total - previous[1]) / elapsed * 100), 1)
        return percent


def merge_samples(samples: list[CpuSample]) -> CpuSample:
    """One sample standing for several: means of what was measured (per core too), the
    peak of the tree's resident memory (memory pressure is about the peak)."""
    if len(samples) == 1:
        return samples[0]

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(sum(known) / len(known), 1) if known else None

    cores = [s.per_core_percent for s in samples]
    per_core = ([round(sum(c[i] for c in cores) / len(cores), 1) for i in range(len(cores[0]))]
                if cores[0] and all(len(c) == len(cores[0]) for c in cores) else list(samples[-1].per_core_percent))
    rss = [s.tree_rss_bytes for s in samples if s.tree_rss_bytes is not None]
    return CpuSample(
        t=round(sum(s.t for s in samples) / len(samples), 3),
        system_percent=mean([s.system_percent for s in samples]) or 0.0,
        per_core_percent=per_core,
        tree_percent=mean([s.tree_percent for s in samples]) or 0.0,
        main_percent=mean([s.main_percent for s in samples]),
        main_thread_percent=mean([s.main_thread_percent for s in samples]),
        workers_percent=mean([s.workers_percent for s in samples]),
        tree_rss_bytes=max(rss) if rss else None,
        iowait_percent=mean([s.iowait_percent for s in samples]),
    )

