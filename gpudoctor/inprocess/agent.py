"""The agent, installed in this process for the length of a watch, then removed.

Under ``diagnose`` the agent rides into the workload through sitecustomize and lives
as long as the process. Here the same code (gpudoctor.agent: TorchHooks, the profiler
window, the event writer) is set up by `InProcessAgent.start` and taken down by
`close`, which leaves torch as it found it (gpudoctor.inprocess.patches), stops the
event writer's thread and records how the watched block ended. Steps come from the
same sources: optimizer steps, DataLoader batches and ``gpudoctor.step()`` (which
forwards to ``gpudoctor.agent.step`` while a watch runs).

Nothing here raises into the user's program: a failure is logged and the watch goes
on measuring what it still can.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from gpudoctor.inprocess.patches import TorchPatchGuard

log = logging.getLogger(__name__)

_ACTIVE_LOCK = threading.Lock()
_active: InProcessAgent | None = None  # one watch at a time: torch's hooks are process-wide


class _OomForwarder:
    """CUDA's out-of-memory observers cannot be detached: one forwarder per process is
    attached once, and passes events to the watch that is running (none: dropped)."""

    def __init__(self) -> None:
        self.target: Any = None
        self.attached = False

    def __call__(self, *args: Any) -> None:
        target = self.target
        if target is not None:
            try:
                target(*args)
            except Exception:  # noqa: BLE001 (gpudoctor's observer never raises into the allocator)
                pass


_OOM = _OomForwarder()


def diagnose_agent_running() -> bool:
    """True when this process already runs under `gpudoctor diagnose` (its agent is loaded)."""
    module = sys.modules.get("_gpudoctor_agent")
    return module is not None and getattr(module, "_AGENT", None) is not None


class InProcessAgent:
    def __init__(self, directory: Path, config: dict[str, Any]) -> None:
        self.directory = directory
        self.config = config
        self.agent: Any = None
        self.hooks: Any = None
        self.guard: TorchPatchGuard | None = None
        self.torch_error: str | None = None
        self.closed = False
        self._attach_forwarder: Any = None  # torch's attach function for the shared OOM observer

    # -- start -------------------------------------------------------------------
    def start(self) -> bool:
        """Install the agent; False when another watch runs (this one then records nothing)."""
        global _active
        with _ACTIVE_LOCK:
            if _active is not None:
                return False
            _active = self
        from gpudoctor import agent as agent_module

        config = dict(agent_module.DEFAULT_CONFIG)
        config.update(self.config)
        self.agent = agent_module.Agent(str(self.directory), config)
        self.agent.emit("hello", pid=_pid(), ppid=None, python=sys.version.split()[0], role="main")
        agent_module._AGENT = self.agent  # gpudoctor.step() reaches it through gpudoctor.agent.step
        try:
            import torch
        except Exception as exc:  # noqa: BLE001  (not installed, or broken: sampling only)
            self.torch_error = f"torch could not be imported: {type(exc).__name__}: {exc}"
            return True
        try:
            agent_module.describe_process(self.agent)
            self.guard = TorchPatchGuard()
            from gpudoctor.agent.torch_hooks import TorchHooks

            hooks = TorchHooks(self.agent, torch)
            hooks.install()
            self.hooks = hooks
            self.agent.torch_hooks = hooks
            self._share_oom_observer(torch)
        except Exception as exc:
            log.warning("gpudoctor: the torch hooks could not be installed: %s", exc, exc_info=True)
            self.torch_error = f"the torch hooks could not be installed: {type(exc).__name__}: {exc}"
        return True

    def _share_oom_observer(self, torch: Any) -> None:
        pending = getattr(self.hooks, "_pending_oom_observer", None)
        if pending is None:
            return
        self.hooks._pending_oom_observer = None  # attached through the forwarder instead
        _OOM.target = pending[1]
        self._attach_forwarder = pending[0]

    def poll(self) -> None:
        """From the watch's ticker thread: attach the OOM forwarder once CUDA is up."""
        attach = self._attach_forwarder
        if attach is None or _OOM.attached or self.hooks is None or not self.hooks.cuda_initialized():
            return
        try:
            attach(_OOM)
            _OOM.attached = True
        except Exception as exc:  # noqa: BLE001 (no OOM observer: the rest of the watch goes on)
            log.debug("oom observer: %s", exc)
            self._attach_forwarder = None

    # -- end ---------------------------------------------------------------------
    def record_exit(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                    tb: TracebackType | None) -> str:
        """Record how the watched block ended: exited | interrupted | crashed."""
        if exc_type is None or self.agent is None:
            return "exited"
        from gpudoctor import agent as agent_module

        try:
            if issubclass(exc_type, KeyboardInterrupt):
                self.agent.emit("interrupt", type=exc_type.__name__)
                return "interrupted"
            if issubclass(exc_type, SystemExit):
                return "exited"
            agent_module._record_exception(self.agent, exc_type, exc, tb, thread=None)
        except Exception as error:  # noqa: BLE001 (the user's exception still propagates)
            log.debug("recording the exception failed: %s", error)
        return "crashed"

    def close(self) -> None:
        """Finish the hooks (the profiler window closes here, on the caller's thread), flush
        the events, stop the writer thread and give torch back as it was. Idempotent."""
        global _active
        if self.closed:
            return
        self.closed = True
        from gpudoctor import agent as agent_module

        try:
            if self.hooks is not None:
                self.hooks.finish()
                profiler = getattr(self.hooks, "profiler", None)
                if profiler is not None and getattr(profiler, "prof", None) is not None:
                    log.warning("gpudoctor: the profiler window was opened on another thread and could not be "
                                "closed from this one; end the watch on the thread that runs the steps")
            if self.agent is not None:
                self.agent.emit("bye", pid=_pid())
                self.agent.writer.close()
                thread = getattr(self.agent.writer, "_thread", None)
                if thread is not None and thread is not threading.current_thread():
                    thread.join(timeout=2.0)
        except Exception as exc:
            log.warning("gpudoctor: ending the watch: %s", exc, exc_info=True)
        finally:
            _OOM.target = None
            if self.guard is not None:
                self.guard.restore()
            if agent_module._AGENT is self.agent:
                agent_module._AGENT = None
            with _ACTIVE_LOCK:
                if _active is self:
                    _active = None


def _pid() -> int:
    return os.getpid()
