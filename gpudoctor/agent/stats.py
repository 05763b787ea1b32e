"""Per-process counters of the agent: step boundaries and what producing batches cost."""

import threading
import time

_perf = time.perf_counter


def runqueue_s():
    """Seconds this thread has waited for a CPU (Linux schedstat), None elsewhere.

    Wall time = CPU time + time waiting for a CPU + time blocked (I/O, sleep, locks).
    Without this, a CPU-bound worker on an oversubscribed machine looks "idle".
    """
    try:
        with open("/proc/thread-self/schedstat", "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None

_ROOT_ATTRS = ("root", "root_dir", "data_dir", "data_root", "dataset_dir", "path", "data_path",
               "img_dir", "image_dir", "images_dir", "directory", "folder")


class StepTracker:
    """Step boundaries per source (explicit, optimizer, loader), with the data wait inside each."""

    SOURCES = ("explicit", "optimizer", "loader")

    def __init__(self, hooks):
        self.hooks = hooks
        self.lock = threading.Lock()
        self.last = {s: None for s in self.SOURCES}
        self.pending_wait = {s: 0.0 for s in self.SOURCES}
        self.count = {s: 0 for s in self.SOURCES}
        self.agg = {s: [0, 0.0, 0.0] for s in self.SOURCES}  # n, duration, wait
        self.max_events = hooks.agent.config.get("step_events_max", 2000)

    def add_wait(self, seconds):
        with self.lock:
            for s in self.SOURCES:
                self.pending_wait[s] += seconds

    def boundary(self, source):
        now = _perf()
        with self.lock:
            last = self.last[source]
            self.last[source] = now
            wait = self.pending_wait[source]
            self.pending_wait[source] = 0.0
            self.count[source] += 1
            n = self.count[source]
        if last is not None:
            duration = now - last
            if n <= self.max_events:
                self.hooks.agent.emit("step", src=source, n=n, dur=round(duration, 6), wait=round(wait, 6))
            else:
                with self.lock:
                    a = self.agg[source]
                    a[0] += 1
                    a[1] += duration
                    a[2] += wait
        self.hooks.on_step(source, n)

    def flush_aggregates(self):
        for source in self.SOURCES:
            with self.lock:
                n, dur, wait = self.agg[source]
                self.agg[source] = [0, 0.0, 0.0]
                total = self.count[source]
            if n:
                self.hooks.agent.emit("steps_agg", src=source, n=n, dur=round(dur, 6), wait=round(wait, 6), total=total)


class FetchStats:
    """What producing batches cost, in this process (a worker, or the main process)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_key = {}  # key -> [batches, wall, cpu]
        self.dirty = False

    def add(self, key, wall, cpu, runqueue):
        with self.lock:
            entry = self.by_key.setdefault(key, [0, 0.0, 0.0, 0.0, 0])
            entry[0] += 1
            entry[1] += wall
            entry[2] += cpu
            if runqueue is not None:
                entry[3] += runqueue
                entry[4] += 1
            self.dirty = True

    def snapshot(self):
        with self.lock:
            if not self.dirty:
                return None
            self.dirty = False
            return {k: [v[0], round(v[1], 6), round(v[2], 6), round(v[3], 6) if v[4] == v[0] else None]
                    for k, v in self.by_key.items()}
