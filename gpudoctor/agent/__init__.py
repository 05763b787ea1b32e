"""The agent: runs inside every Python process of a `gpudoctor diagnose` run.

Rules it lives by (it is a guest in someone else's program):
- it never imports torch itself; it patches torch when the workload imports it;
- it never raises into user code, never prints, never changes a result, a random
  stream or an exit status; its own failures become `agent_error` events;
- it writes small append-only events (see events.py), bounded for long runs.

Step boundaries come from five sources, by precedence: ``gpudoctor.step()``
(explicit) > ``optimizer.step()`` > an outermost ``backward()`` > a DataLoader batch >
the outermost module forward on its thread (stats.StepTracker says why this order;
step_sources.py how backward and forward are seen). The highest-precedence source
that marked a step lately names the run's steps and drives the profiler windows
(profiler.py); the supervisor records which one it used (``Session.steps.source``).

This package uses the standard library only, with relative imports: the supervisor
loads it by file path into the workload (as ``_gpudoctor_agent``), so the rest of
gpudoctor and its dependencies never land on the workload's sys.path.

Typing (mypy checks the agent like the rest of the package, and the events it writes
against agent/protocol.py), without changing what runs:
- nothing is imported for types at run time: ``TYPE_CHECKING = False`` (typing itself is
  never imported at start-up), and the names it guards appear only in annotations that
  are never evaluated;
- the modules loaded at start-up in every process (this one, events.py, importhook.py,
  writes.py, _site/sitecustomize.py) have no ``from __future__ import annotations``: it
  imports the __future__ module, which a plain interpreter has not loaded. Their
  annotations name builtins, or are strings. The modules loaded once torch is imported
  (torch imports __future__ itself) use it;
- a function the agent hands to torch or to sys (a wrapper patched over torch's own, a
  hook, an except hook) is typed with a type comment: its ``__annotations__`` stay empty
  as before, so code that inspects torch's functions sees what it saw without gpudoctor.
"""

import atexit
import os
import sys
import threading
import time
import types

from .events import EventWriter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal, overload

    from typing_extensions import Unpack

    from . import protocol
    from .torch_hooks import TorchHooks

# Start-up cost matters here: every Python process of the command (launchers, shell
# helpers, non-torch children) loads this. So json, traceback and the redaction
# regexes are imported only when needed (config present, an exception, torch imported).

_AGENT = None

DEFAULT_CONFIG = {
    "profile": True,  # run torch.profiler windows (profiler.py says when)
    "profile_warmup_steps": 5,  # steps of a phase before its window opens
    "profile_warmup_s": 1.0,  # and seconds
    "profile_steps": 10,  # steps in a window, at least
    "profile_min_window_s": 0.3,  # and at least this long (a batch-1 loop's steps are short) ...
    "profile_max_steps": 200,  # ... unless this many steps came first
    "profile_max_window_s": 20.0,  # hard cap on a step-driven window
    # a window of slow steps (profile_steps of them would outlast this) closes once it holds
    # profile_min_steps and lasted this long: a step of Python-made batches traces 10^5-10^6 events,
    # the replay reads at most 150,000 of a window and the stop holds the loop 5-7 us an event
    # (imagenet -j 0: 10 steps, 3.9M events, 26 s); 0: no budget (the steps were asked for)
    "profile_window_budget_s": 2.0,
    "profile_min_steps": 3,
    "profile_no_step_after_s": 3.0,  # no step this long after CUDA started: a time-bounded window
    "profile_time_window_s": 2.0,  # length of that window
    "profile_time_max_calls": 5000,  # or this many hooked calls in it (bounds the trace)
    "profile_max_windows": 4,  # windows per process: start, new phases, one later
    "profile_later_s": 60.0,  # the later window comes at least this long after the first
    "fetch_profile": True,  # cProfile a few batches in one loader process when input-bound
    "fetch_profile_batches": 8,
    "step_events_max": 2000,  # individual step events per source, then per-second aggregates
}


class Agent:
    def __init__(self, directory: str, config: "dict[str, Any]") -> None:
        self.directory = directory
        self.config = config
        self.writer = EventWriter(directory)
        self.started = time.time()
        self.torch_hooks: TorchHooks | None = None
        self._error_counts: dict[str, int] = {}

    if TYPE_CHECKING:
        # one overload per event kind: what each carries is agent/protocol.py's
        @overload
        def emit(self, kind: Literal["hello"], **fields: Unpack[protocol.Hello]) -> None: ...
        @overload
        def emit(self, kind: Literal["process"], **fields: Unpack[protocol.Process]) -> None: ...
        @overload
        def emit(self, kind: Literal["torch"], **fields: Unpack[protocol.Torch]) -> None: ...
        @overload
        def emit(self, kind: Literal["dist"], **fields: Unpack[protocol.Dist]) -> None: ...
        @overload
        def emit(self, kind: Literal["interrupt"], **fields: Unpack[protocol.Interrupt]) -> None: ...
        @overload
        def emit(self, kind: Literal["exception", "oom"], **fields: Unpack[protocol.Uncaught]) -> None: ...
        @overload
        def emit(self, kind: Literal["bye"], **fields: Unpack[protocol.Bye]) -> None: ...
        @overload
        def emit(self, kind: Literal["agent_error"], **fields: Unpack[protocol.AgentError]) -> None: ...
        @overload
        def emit(self, kind: Literal["step"], **fields: Unpack[protocol.Step]) -> None: ...
        @overload
        def emit(self, kind: Literal["steps_agg"], **fields: Unpack[protocol.StepsAgg]) -> None: ...
        @overload
        def emit(self, kind: Literal["forward_root"], **fields: Unpack[protocol.ForwardRoot]) -> None: ...
        @overload
        def emit(self, kind: Literal["loader"], **fields: Unpack[protocol.Loader]) -> None: ...
        @overload
        def emit(self, kind: Literal["loader_workers"], **fields: Unpack[protocol.LoaderWorkers]) -> None: ...
        @overload
        def emit(self, kind: Literal["loader_stats"], **fields: Unpack[protocol.LoaderStats]) -> None: ...
        @overload
        def emit(self, kind: Literal["fetch"], **fields: Unpack[protocol.Fetch]) -> None: ...
        @overload
        def emit(self, kind: Literal["fetch_profile_request"],
                 **fields: Unpack[protocol.FetchProfileRequest]) -> None: ...
        @overload
        def emit(self, kind: Literal["fetch_profile"], **fields: Unpack[protocol.FetchProfile]) -> None: ...
        @overload
        def emit(self, kind: Literal["cuda"], **fields: Unpack[protocol.Cuda]) -> None: ...
        @overload
        def emit(self, kind: Literal["alloc"], **fields: Unpack[protocol.AllocatorSnapshot]) -> None: ...
        @overload
        def emit(self, kind: Literal["oom_observed"], **fields: Unpack[protocol.OomObserved]) -> None: ...
        @overload
        def emit(self, kind: Literal["profile"], **fields: Unpack[protocol.Profile]) -> None: ...
        @overload
        def emit(self, kind: Literal["override"], **fields: Unpack[protocol.Override]) -> None: ...
        @overload
        def emit(self, kind: Literal["write"], **fields: Unpack[protocol.Write]) -> None: ...

    def emit(self, kind: str, **fields: object) -> None:
        try:
            self.writer.emit(kind, **fields)
        except Exception:  # noqa: BLE001 (an event that cannot be written is dropped, never raised)
            pass

    def emit_steps(self, steps: "list[tuple[float, protocol.Step]]") -> None:
        """Steps recorded by the stepping thread, written later by the agent's thread
        (stats.StepTracker.flush): each with the time.time() of the step itself."""
        try:
            self.writer.emit_timed("step", steps)
        except Exception:  # noqa: BLE001 (events that cannot be written are dropped, never raised)
            pass

    def hello(self, **fields: "Unpack[protocol.Hello]") -> None:
        """The start-up "hello", written at once, without starting the flusher thread."""
        self.writer.emit_now("hello", **fields)

    def error(self, where: str, exc: BaseException) -> None:
        """Record an agent failure (rate-limited); never raise."""
        count = self._error_counts.get(where, 0)
        self._error_counts[where] = count + 1
        if count < 3:
            self.emit("agent_error", where=where, error=("%s: %s" % (type(exc).__name__, exc))[:500])


def start() -> "Agent | None":
    """Called from sitecustomize. Safe to call more than once."""
    global _AGENT
    if _AGENT is not None and _AGENT.writer._pid == os.getpid():
        return _AGENT
    directory = os.environ.get("GPUDOCTOR_SESSION_DIR")
    if not directory or not os.path.isdir(directory):
        return None
    config: dict[str, Any] = dict(DEFAULT_CONFIG)
    raw_config = os.environ.get("GPUDOCTOR_AGENT_CONFIG")
    if raw_config:
        import json

        try:
            config.update(json.loads(raw_config))
        except ValueError:
            pass
    agent = Agent(directory, config)
    _AGENT = agent
    # argv (redacted) follows in "process" once torch is imported: processes that never
    # import torch are not worth the redaction's cost, and the supervisor knows the command
    agent.hello(
        pid=os.getpid(),
        ppid=os.getppid(),
        python=sys.version.split()[0],
        rank=os.environ.get("RANK"),
        local_rank=os.environ.get("LOCAL_RANK"),
        world_size=os.environ.get("WORLD_SIZE"),
        local_world_size=os.environ.get("LOCAL_WORLD_SIZE"),
        job_id=os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID"),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )
    _install_exception_hooks(agent)
    atexit.register(_at_exit, agent)
    if config.get("record_writes"):  # diagnose --try only: where the workload writes (agent/writes.py)
        try:
            from .writes import install as record_writes

            record_writes(agent, protect=config.get("protect_writes"))
        except Exception as exc:  # noqa: BLE001
            agent.error("record_writes", exc)
    try:
        from .importhook import install_import_hook

        install_import_hook(agent)
    except Exception as exc:  # noqa: BLE001 (without the import hook the workload runs unobserved)
        agent.error("import_hook", exc)
    return agent


def describe_process(agent: Agent) -> None:
    """Emitted when torch is imported: the redacted command line of this process."""
    from .redact import env_secrets, redact_argv

    argv = [sys.executable, *(sys.argv or [])]
    agent.emit("process", argv=redact_argv(argv, env_secrets(os.environ)))


def step() -> None:
    """Explicit step boundary (gpudoctor.step() forwards here)."""
    agent = _AGENT
    if agent is not None and agent.torch_hooks is not None:
        agent.torch_hooks.steps.boundary("explicit")


def _format_exception(exc_type: "type[BaseException]", exc: "BaseException | None",
                      tb: "types.TracebackType | None") -> "str | None":
    from .redact import env_secrets, redact_text

    text, interrupted = None, []
    # A signal handler can raise into the formatting: torch's SIGCHLD handler raises
    # "DataLoader worker ... is killed by signal" while the loop's own error is recorded.
    # Each signal raises once, so try again, and keep what interrupted it.
    for _ in range(3):
        try:
            import traceback

            text = "".join(traceback.format_exception(exc_type, exc, tb))
            break
        except Exception as extra:  # noqa: BLE001 (formatting may fail again; each failure is noted)
            interrupted.append("%s: %s" % (type(extra).__name__, extra))
    if text and interrupted:
        text += "\n(while this was recorded: %s)\n" % "; ".join(interrupted)
    return redact_text(text[-8000:], env_secrets(os.environ)) if text else None


# The agent's wrappers that call through to the workload's code (DataLoader.__next__,
# autograd.backward): a workload error raised below them passes through their frames.
_CALL_THROUGH = frozenset(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), name) for name in ("torch_hooks.py", "step_sources.py")
)


def _strip_call_through(exc: "BaseException | None") -> None:
    """Drop the agent's call-through frames from exc's traceback and from the causes and
    contexts it chains: the workload's error prints as it would have without gpudoctor."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = []
        tb = exc.__traceback__
        while tb is not None:
            frames.append(tb)
            tb = tb.tb_next
        kept = [t for t in frames if os.path.abspath(t.tb_frame.f_code.co_filename) not in _CALL_THROUGH]
        if len(kept) < len(frames):
            rebuilt = None
            for t in reversed(kept):
                rebuilt = types.TracebackType(rebuilt, t.tb_frame, t.tb_lasti, t.tb_lineno)
            exc.__traceback__ = rebuilt
        exc = exc.__cause__ or exc.__context__


def _install_exception_hooks(agent: Agent) -> None:
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):  # type: (type[BaseException], BaseException, types.TracebackType | None) -> None
        quiet = False
        try:
            if not issubclass(exc_type, (KeyboardInterrupt, SystemExit)) and not _is_stop_signal(exc_type):
                _record_exception(agent, exc_type, exc, tb, thread=None)
            else:
                quiet = _stopped_by_gpudoctor(agent, exc_type) and previous is sys.__excepthook__
                agent.emit("interrupt", type=exc_type.__name__, by_gpudoctor=quiet or None)
            agent.writer.flush(force=True)
        except Exception:  # noqa: BLE001 (the workload's exception still reaches its own hook)
            pass
        if not quiet:
            try:
                _strip_call_through(exc)
                tb = exc.__traceback__ if exc is not None else tb
            except Exception:  # noqa: BLE001 (the traceback is then shown as it is)
                pass
            previous(exc_type, exc, tb)

    sys.excepthook = excepthook

    previous_thread_hook = threading.excepthook

    def thread_hook(args):  # type: (threading.ExceptHookArgs) -> None
        try:
            if args.exc_type is not SystemExit and getattr(args.thread, "name", "") != "gpudoctor-agent":
                _record_exception(agent, args.exc_type, args.exc_value, args.exc_traceback,
                                  thread=getattr(args.thread, "name", None))
        except Exception:  # noqa: BLE001 (the thread's exception still reaches its own hook)
            pass
        previous_thread_hook(args)

    threading.excepthook = thread_hook


# Written by the supervisor into the session directory just before it sends SIGINT for
# --steps/--duration (never for the user's own Ctrl-C).
STOP_MARKER = "stop-requested"


def _is_stop_signal(exc_type: type) -> bool:
    """torchrun's launcher turns SIGINT/SIGTERM into its SignalException: an interrupt, not a crash."""
    return getattr(exc_type, "__name__", "") == "SignalException" and str(
        getattr(exc_type, "__module__", "")).startswith("torch.distributed.elastic")


def _stopped_by_gpudoctor(agent: Agent, exc_type: "type[BaseException]") -> bool:
    """A KeyboardInterrupt that gpudoctor caused (--steps/--duration): the stop was asked
    for, so Python's traceback of it would only look like a crash. Its exit status (killed by
    SIGINT) and whatever the workload printed while handling it stay as they are."""
    try:
        return (issubclass(exc_type, KeyboardInterrupt) or _is_stop_signal(exc_type)) and os.path.exists(
            os.path.join(agent.directory, STOP_MARKER))
    except Exception:  # noqa: BLE001 (unknown: the workload's own interrupt)
        return False


def _record_exception(agent: Agent, exc_type: "type[BaseException]", exc: "BaseException | None",
                      tb: "types.TracebackType | None", thread: "str | None") -> None:
    from .redact import env_secrets, redact_text

    name = getattr(exc_type, "__name__", str(exc_type))
    kind: Literal["oom", "exception"] = "oom" if name == "OutOfMemoryError" else "exception"
    module = getattr(exc_type, "__module__", "")
    fields: protocol.Uncaught = {
        "type": module + "." + name if module not in ("builtins", "") else name,
        "message": redact_text(str(exc), env_secrets(os.environ))[:2000],
        "traceback": _format_exception(exc_type, exc, tb),
        "thread": thread,
    }
    if kind == "oom" and agent.torch_hooks is not None:
        fields["allocator"] = agent.torch_hooks.allocator_snapshot("oom")
    agent.emit(kind, **fields)


def _at_exit(agent: Agent) -> None:
    try:
        if agent.torch_hooks is not None:
            agent.torch_hooks.finish()
        agent.emit("bye", pid=os.getpid())
        agent.writer.close()
    except Exception:  # noqa: BLE001 (exit must never fail because of gpudoctor)
        pass
