"""A bounded torch.profiler window: a few steady steps, then profiling stops for good.

The raw trace goes to the session directory; the supervisor turns it into compact
statistics (gpudoctor.collectors.trace) after the run, so the workload pays only
for the window itself and one export.

The window opens and closes only on the thread that runs the steps, inside a step
boundary. Never from the agent's own thread: on an H200, starting Kineto from
another thread aborted the process ("External init callback must run in same
thread as registerClient"), and importing torch.profiler there raced the
workload's own imports.

Runs without step boundaries (an inference loop with no DataLoader and no
optimizer) get a time-bounded window instead: when no step has shown up
`profile_no_step_after_s` after CUDA started, the agent's thread adds a global
module forward pre-hook, and the window opens at the workload's next module
forward on the main thread, and closes at the first forward there after
`profile_time_window_s`. The hook then removes itself. A step that shows up while
that window runs discards it (the step-driven window takes over). Programs that
use torch.compile get no time-bounded window: a global module hook would change
what dynamo traces.
"""

import os
import threading
import time

MAIN_THREAD = threading.main_thread().ident


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
        self.thread_ident = None
        self.no_step_after = float(config.get("profile_no_step_after_s", 10.0))
        self.time_window = float(config.get("profile_time_window_s", 3.0))
        self.cuda_seen = None  # when the agent's thread first saw CUDA initialized
        self.watch = None  # the forward pre-hook's handle, while installed

    def _primary(self):
        count = self.hooks.steps.count
        for source in ("explicit", "optimizer", "loader"):
            if count[source]:
                return source
        return None

    def on_step(self, source, n):
        if self.state == self.RUNNING and self.source == "time":
            self.stop("superseded", keep=False)  # the run has steps after all: profile those
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
            self.start_wall = time.time()  # the window begins once tracing runs (starting it takes a while)
        except Exception as exc:
            self.state = self.DONE
            self.hooks.agent.emit("profile", error="profiler failed to start: %s: %s" % (type(exc).__name__, exc))

    # -- runs without step boundaries ---------------------------------------------
    def poll(self):
        """On the agent's thread: add the forward hook once a stepless run is due a window."""
        if self.state != self.IDLE or self.watch is not None or self._primary() is not None:
            return
        if not self.hooks.cuda_initialized():
            return
        now = time.time()
        if self.cuda_seen is None:
            self.cuda_seen = now
        if now - self.cuda_seen < self.no_step_after:
            return
        if getattr(self.hooks, "compile_used", False):
            self.state = self.DONE
            self.hooks.agent.emit("profile", error="no step boundaries, and the workload uses torch.compile: no "
                                  "time-bounded window (mark steps with gpudoctor.step())")
            return
        from torch.nn.modules import module

        # one dict insert under the GIL: the workload's thread copies the hooks before calling them
        self.watch = module.register_module_forward_pre_hook(self._on_forward)

    def _on_forward(self, module, args):
        # only the main thread's forwards open and close it: replicas of DataParallel run
        # forwards on helper threads, where a window could not be closed again
        if threading.get_ident() != MAIN_THREAD:
            return None
        if self.state == self.IDLE:
            if self._primary() is not None:
                self._unwatch()
            else:
                self.start("time", 0)
        elif self.state == self.RUNNING:
            if self.source == "time" and time.time() - self.start_wall >= self.time_window:
                self.stop("time")
        else:
            self._unwatch()
        return None

    def _unwatch(self):
        watch, self.watch = self.watch, None
        if watch is not None:
            watch.remove()

    def stop(self, why, keep=True):
        if self.state != self.RUNNING or self.prof is None:
            return
        if threading.get_ident() != self.thread_ident:
            # e.g. interpreter exit on the main thread while steps ran on another: stopping
            # Kineto from a foreign thread is not safe; the window is abandoned instead
            self.state = self.DONE
            self.hooks.agent.emit("profile", error="the profiler window could not be closed on its own thread")
            return
        self.state = self.DONE if keep else self.IDLE
        self._unwatch()
        prof, self.prof = self.prof, None
        if not keep:
            try:
                prof.stop()
            except Exception:
                self.state = self.DONE
            return
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
