"""A bounded torch.profiler window: a few steady steps, then profiling stops for good.

The raw trace goes to the session directory; the supervisor turns it into compact
statistics (gpudoctor.collectors.trace) after the run, so the workload pays only
for the window itself and one export.

The window opens and closes only on the thread that runs the steps, inside a step
boundary. Never from the agent's own thread: on an H200, starting Kineto from
another thread aborted the process ("External init callback must run in same
thread as registerClient"), and importing torch.profiler there raced the
workload's own imports. Runs without step boundaries get no window (they can
call gpudoctor.step()).
"""

import os
import threading
import time


class ProfilerWindow:
    IDLE, RUNNING, DONE = "idle", "running", "done"

    def __init__(self, hooks):
        self.hooks = hooks
        self.torch = hooks.torch
        config = hooks.agent.config
        self.warmup = int(config.get("profile_warmup_steps", 5))
        self.steps = int(config.get("profile_steps", 10))
        self.max_window = float(config.get("profile_max_window_s", 20.0))
        self.state = self.IDLE
        self.prof = None
        self.source = None
        self.start_n = 0
        self.start_wall = 0.0
        self.created = time.time()
        self.thread_ident = None

    def _primary(self):
        count = self.hooks.steps.count
        for source in ("explicit", "optimizer", "loader"):
            if count[source]:
                return source
        return None

    def on_step(self, source, n):
        if self.state == self.DONE or source != self._primary():
            return
        if self.state == self.IDLE:
            if n > self.warmup and self.hooks.cuda_initialized():
                self.start(source, n)
        elif self.state == self.RUNNING and self.source == source:
            if n - self.start_n >= self.steps or time.time() - self.start_wall > self.max_window:
                self.stop("steps")

    def start(self, source, n):
        torch = self.torch
        try:
            if torch.autograd._profiler_enabled():
                self.hooks.agent.emit("profile", error="the workload runs its own profiler; gpudoctor's window was skipped")
                self.state = self.DONE
                return
        except Exception:
            pass
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_initialized():
            activities.append(ProfilerActivity.CUDA)
        self.state = self.RUNNING  # set first: never retried if start fails
        self.thread_ident = threading.get_ident()
        self.source = source
        self.start_n = n
        self.start_wall = time.time()
        try:
            prof = profile(activities=activities, record_shapes=False, with_stack=True)
            prof.start()
            self.prof = prof
        except Exception as exc:
            self.state = self.DONE
            self.hooks.agent.emit("profile", error="profiler failed to start: %s: %s" % (type(exc).__name__, exc))

    def stop(self, why):
        if self.state != self.RUNNING or self.prof is None:
            return
        if threading.get_ident() != self.thread_ident:
            # e.g. interpreter exit on the main thread while steps ran on another: stopping
            # Kineto from a foreign thread is not safe; the window is abandoned instead
            self.state = self.DONE
            self.hooks.agent.emit("profile", error="the profiler window could not be closed on its own thread")
            return
        self.state = self.DONE
        prof, self.prof = self.prof, None
        end_wall = time.time()
        steps = 0
        if self.source in ("explicit", "optimizer", "loader"):
            steps = self.hooks.steps.count[self.source] - self.start_n
        fields = {"source": self.source, "steps": steps, "t_start": self.start_wall, "t_end": end_wall, "why": why}
        try:
            prof.stop()
            path = os.path.join(self.hooks.agent.directory, "trace-%d.json" % os.getpid())
            prof.export_chrome_trace(path)
            fields["path"] = os.path.basename(path)
        except Exception as exc:
            fields["error"] = "profiler failed to stop/export: %s: %s" % (type(exc).__name__, exc)
        try:
            matmul = self.torch.backends.cuda.matmul
            fields["tf32"] = bool(matmul.allow_tf32)
            fields["float32_matmul_precision"] = self.torch.get_float32_matmul_precision()
        except Exception:
            pass
        snap = self.hooks.allocator_snapshot("steady")
        if snap:
            self.hooks.agent.emit("alloc", **snap)
        self.hooks.agent.emit("profile", **fields)
