"""`gpudoctor.watch()` and `gpudoctor.diagnose_fn()`: diagnose a loop in this very process.

    import gpudoctor
    with gpudoctor.watch("train", out="reports/") as w:
        for batch in loader:
            ...
    print(w.report().verdict)

Inside the block everything `diagnose` measures is measured (CPU of this process and
its DataLoader workers, the GPUs it opened, the agent's torch hooks, the profiler
window after `warmup_steps` steps); at the end the same checks run on the same kind of
Session and `w.report()` returns the report (gpudoctor.inprocess.result.Report).

The user's program comes first: nothing here raises into it. A failure of gpudoctor's
own is logged (logger "gpudoctor") and the watch measures what it still can or reports
nothing (`report()` is None, `error` says why). The block's own exception is recorded
(GD001) and propagates unchanged. One watch runs at a time in a process; a second one
started meanwhile, or a watch inside a `gpudoctor diagnose` run (whose report already
covers it), records nothing. After the block torch is as it was (see patches.py).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from gpudoctor.inprocess.result import Report
from gpudoctor.reports.formats import DEFAULT_FILE_FORMATS

log = logging.getLogger(__name__)

_EXIT_CODES = {"exited": 0, "crashed": 1, "interrupted": 130}


class Watch:
    def __init__(self, name: str = "watch", *, out: str | None = None, formats: Iterable[str] = DEFAULT_FILE_FORMATS,
                 steps: int | None = None, duration: float | None = None, profile: bool = True,
                 warmup_steps: int = 5, profile_steps: int = 10, stepless_after: float = 10.0,
                 stepless_window: float = 3.0, interval: float = 0.5, data: Iterable[str] = (),
                 ignore: Iterable[str] = (), progress: bool | None = None, summary: bool = False,
                 force: bool = False) -> None:
        self.name = name
        self.out = out
        self.formats = tuple(formats)
        self.target_steps = steps
        self.duration = duration
        self.interval = max(0.1, float(interval))
        self.data = tuple(str(d) for d in data)
        self.ignore = tuple(ignore)
        self.progress_wanted = progress
        self.summary = summary
        self.force = force
        self.agent_config = {
            "profile": bool(profile),
            "profile_warmup_steps": int(warmup_steps),
            "profile_steps": int(profile_steps),
            # the caller named the steps: the window follows them, not the clock (a notebook cell
            # or a callback's few steps may last well under diagnose's 1 s warm-up and 0.3 s window)
            "profile_warmup_s": 0.0,
            "profile_min_window_s": 0.0,
            "profile_window_budget_s": 0.0,
            "profile_no_step_after_s": float(stepless_after),
            "profile_time_window_s": float(stepless_window),
        }
        self.error: str | None = None  # why this watch recorded nothing, or could not report
        self.files: dict[str, Path] = {}
        self._report: Report | None = None
        self._agent: Any = None
        self._recorder: Any = None
        self._progress: Any = None
        self._workdir: Path | None = None
        self._started = 0.0
        self.running = False

    # -- the context manager ---------------------------------------------------------
    def __enter__(self) -> Watch:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self._finish(exc_type, exc, tb)
        return False  # the block's exception, if any, is the user's: it propagates

    def start(self) -> Watch:
        """Start watching (what `with` does); returns self."""
        if self.running or self._report is not None:
            return self
        try:
            self._start()
        except Exception as exc:  # noqa: BLE001 (the user's code runs unwatched, never fails)
            self._abandon(f"gpudoctor could not start watching: {type(exc).__name__}: {exc}", exc)
        return self

    def stop(self) -> Report | None:
        """Stop watching and build the report (what leaving `with` does); call it on the thread
        that runs the steps, so the profiler window closes where it opened."""
        self._finish(None, None, None)
        return self._report

    def _start(self) -> None:
        from gpudoctor.inprocess.agent import InProcessAgent, diagnose_agent_running
        from gpudoctor.inprocess.progress import make_progress
        from gpudoctor.inprocess.recorder import Recorder

        if diagnose_agent_running():
            self.error = (
                "this process runs under `gpudoctor diagnose`, whose report covers it: the watch records nothing"
            )
            log.warning("gpudoctor: %s", self.error)
            return
        self._workdir = Path(tempfile.mkdtemp(prefix="gpudoctor-watch-"))
        agent = InProcessAgent(self._workdir, self.agent_config)
        if not agent.start():
            self.error = "another gpudoctor watch is running in this process: this one records nothing"
            log.warning("gpudoctor: %s", self.error)
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
            return
        self._agent = agent
        self._progress = make_progress(self.progress_wanted)
        self._recorder = Recorder(self._workdir, self.interval, self.data, on_tick=self._progress.update,
                                  poll_agent=agent.poll)
        self._started = time.monotonic()
        self.running = True
        self._progress.start()
        self._recorder.start()

    # -- while running ------------------------------------------------------------------
    def step(self) -> None:
        """Mark a step boundary (the same as gpudoctor.step())."""
        import gpudoctor

        gpudoctor.step()

    @property
    def steps(self) -> int:
        """Steps seen so far (read every half second)."""
        recorder = self._recorder
        return int(recorder.steps) if recorder is not None else 0

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started if self._started else 0.0

    @property
    def done(self) -> bool:
        """True once `steps` steps or `duration` seconds were watched: a loop may test it
        (``while not w.done: ...``); the watch itself never stops the program."""
        if self.target_steps is not None and self.steps >= self.target_steps:
            return True
        return self.duration is not None and self.elapsed_s >= self.duration

    # -- the end -------------------------------------------------------------------------
    def report(self) -> Report | None:
        """The report, once the watch ended; None before, or when nothing could be recorded
        (`error` says why)."""
        if self.running:
            log.warning("gpudoctor: the watch is still running: leave the `with` block (or call stop()) first")
        return self._report

    def _finish(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                tb: TracebackType | None) -> None:
        if not self.running:
            return
        self.running = False
        try:
            self._report = self._conclude(exc_type, exc, tb)
        except Exception as error:  # noqa: BLE001 (the user's code is done; the failure is the result)
            self._abandon(f"gpudoctor could not build the report: {type(error).__name__}: {error}", error)
        finally:
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None

    def _conclude(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                  tb: TracebackType | None) -> Report:
        from gpudoctor.verdict.judge import JudgeOptions, gzip_trace, judge

        agent, recorder = self._agent, self._recorder
        how = agent.record_exit(exc_type, exc, tb)
        agent.close()  # the profiler window closes here: on the thread that ends the watch
        gpu_result, duration = recorder.stop_sampling()
        session = recorder.session(gpu_result, duration, exit_code=_EXIT_CODES[how],
                                   stop_reason="interrupted" if how == "interrupted" else "exited",
                                   torch_error=agent.torch_error)
        if self.name != "watch":
            session.notes.append(f"watched in-process: {self.name}")
        too_few = _too_few_steps(session)
        if too_few:
            session.notes.append(too_few)
        data, _ = judge(session, JudgeOptions(ignore=self.ignore))
        report = Report(data, session=session, trace_bytes=gzip_trace(recorder.trace_path()))
        final = f"gpudoctor: watched {duration:.0f} s, {session.steps.count} steps. {report.verdict}"
        if too_few:
            final += f" Note: {too_few}."
        if self.out is not None:
            try:
                self.files = report.save(self.out, formats=self.formats, name=self.name, force=self.force)
                final += f" Report: {self.files.get('html') or next(iter(self.files.values()), '')}"
            except Exception as error:  # noqa: BLE001  (the report object is still there, in memory)
                self.error = f"the report could not be written: {error}"
                log.warning("gpudoctor: %s", self.error)
        self._progress.stop(final)
        if self.summary:
            _print_summary(report)
        return report

    def _abandon(self, why: str, exc: BaseException) -> None:
        """Give up quietly: take down whatever was started, say why, never raise."""
        self.error = why
        self.running = False
        log.warning("gpudoctor: %s", why, exc_info=exc)
        stops: tuple[Callable[[], object], ...] = (lambda: self._progress and self._progress.stop(None),
                                                   lambda: self._agent and self._agent.close(),
                                                   lambda: self._recorder and self._recorder.stop_sampling())
        for stop in stops:
            try:
                stop()
            except Exception:  # noqa: BLE001 (each stop is tried; none may raise into the user's code)
                pass
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def _too_few_steps(session: Any) -> str | None:
    """How many steps a firm verdict needs, when this watch saw too few steady ones."""
    from gpudoctor import metrics

    steady, count = metrics.steady_step_count(session), session.steps.count
    if not count or steady >= metrics.MIN_STEADY_STEPS:
        return None
    return (f"{steady} of the {count} steps watched were steady (the first ones and those around the profiled "
            f"window are left out); a firm verdict needs {metrics.MIN_STEADY_STEPS}: watch at least "
            f"{count + metrics.MIN_STEADY_STEPS - steady} steps")


def _print_summary(report: Report) -> None:
    import sys

    try:
        from gpudoctor.reports import terminal

        terminal.show_summary(report.data, sys.stderr, written={k: str(v) for k, v in report.files.items()})
    except Exception as exc:  # noqa: BLE001 (the verdict is still printed)
        log.debug("summary: %s", exc)
        print(report.verdict, file=sys.stderr)


def watch(name: str = "watch", **options: Any) -> Watch:
    """Watch the code in a `with` block of this process; see Watch for the options."""
    return Watch(name, **options)


def diagnose_fn(fn: Callable[..., Any], *args: Any, steps: int | None = None,
                fn_kwargs: dict[str, Any] | None = None, **options: Any) -> Report | None:
    """Run `fn(*args, **fn_kwargs)` under a watch and return the report.

    steps=None: call it once (a whole training function; steps come from its optimizer,
    DataLoader or gpudoctor.step()). steps=N: call it N times, each call one step (a
    step function). `report.result` is what the last call returned. An exception from
    `fn` propagates, after the report was built (and written, with out=); the report
    hangs on the exception as `gpudoctor_report`."""
    options.setdefault("name", getattr(fn, "__name__", "function"))
    name = str(options.pop("name"))
    w = Watch(name, **options)
    result: Any = None
    try:
        with w:
            if steps is None:
                result = fn(*args, **(fn_kwargs or {}))
            else:
                w.step()  # the first call's start: each call is then one whole step
                for _ in range(int(steps)):
                    result = fn(*args, **(fn_kwargs or {}))
                    w.step()
    except BaseException as exc:
        try:
            exc.gpudoctor_report = w.report()  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 (the user's own exception is re-raised as it was)
            pass
        raise
    report = w.report()
    if report is not None:
        report.result = result
    return report
