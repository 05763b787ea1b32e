"""A helper process for a long `gpudoctor analyze`, forked before the trace is decoded.

Decoding a long trace keeps one core busy for seconds, and its statistics more. Forked
first (while this process is small), the helper uses another core: it decodes the second
half of the trace while this process decodes the first (trace_decode.split_point), then
replays the part of the window chosen for the replay while the statistics are computed
(and the renderers are imported here). A trace that cannot be split (gzip) is decoded
here while the helper imports the report renderers (matplotlib for the HTML's charts);
it replays, then renders the finished report. What it gets travels through a pipe: the
events to replay (pickled columns), the report (a dict); what comes back is the decoded
half, the ReplaySummary and the text. It shares nothing else with this process, so
freeing the decoded events here frees them.

When no helper can run (one usable core, no fork, a failed start) or it dies, the same
work is done here when its result is asked for: the same code on the same data.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoctor.run.forking import pipe, spare_core, start_child

if TYPE_CHECKING:
    from gpudoctor.collectors.trace_decode import TraceIndex
    from gpudoctor.session import ReplaySummary

log = logging.getLogger(__name__)

# formats the helper renders beside the page this process renders, once the report is judged
# (render_ahead): the JSON report, while the HTML is made here
AHEAD_FORMATS = ("json",)


class Helper:
    """Renders `formats` and replays in a forked process; anything else, or after a failure, here."""

    def __init__(self, formats: tuple[str, ...] = (), fail_on: str | None = None) -> None:
        self.formats = formats
        self.fail_on = fail_on
        self.decoding = False  # the helper decodes the second half of a trace (trace_decode.decode_rest)
        self._conn: Any = None
        self._process: Any = None
        self._ahead: list[str] = []  # formats asked of the helper by render_ahead, answers not yet read
        self._answers: dict[str, tuple[str, str]] = {}  # read, not yet taken by render
        # the memory files the decoded half comes through and the part to replay goes through (trace_share)
        self._half_file: int | None = None
        self._part_file: int | None = None

    @classmethod
    def start(cls, formats: tuple[str, ...] = (), fail_on: str | None = None, trace: Path | None = None) -> Helper:
        """`trace`: a trace file whose second half the helper decodes (see `rest`) if it can be
        split; then the helper renders nothing: its core decodes and replays while this
        process imports the renderers. The decoder (numpy, msgspec) is imported before the
        fork, once for both: each process starts decoding as soon as it is forked (a missing
        package is one line from the command), and each asks whether the trace splits (the
        same answer). The memory files the decoded half comes back through and the part to
        replay goes through are made then too (trace_share)."""
        helper = cls(formats, fail_on)
        if trace is not None:
            from gpudoctor.collectors.trace_share import memory_file  # and the decoder with it

            if spare_core():
                helper._half_file, helper._part_file = memory_file("half"), memory_file("part")
        if spare_core():
            try:
                ours, theirs = pipe(duplex=True)
                files = (helper._half_file, helper._part_file)
                helper._process = start_child(_serve, (theirs, formats, fail_on, trace, files), "gpudoctor-helper")
                theirs.close()
                helper._conn = ours
            except (OSError, ValueError) as exc:
                log.debug("no helper process: %s", exc)
        if trace is not None:
            from gpudoctor.collectors.trace_decode import split_point

            if split_point(trace) is not None:
                helper.formats = ()
                helper.decoding = helper._conn is not None
        return helper

    @property
    def active(self) -> bool:
        return self._conn is not None

    def rest(self) -> TraceIndex | None:
        """The second half of the trace the helper was started with, decoded there (None when
        it was not split or did not decode): trace_decode.read_trace's `rest`."""
        if not self.decoding:
            return None
        self.decoding = False
        if self._conn is not None:
            try:
                status, index = self._conn.recv()
                if status == "decoded":  # None if it cannot be read: then the trace is read whole here
                    return _received(index, self._take_file("half"))
            except (EOFError, OSError) as exc:
                self._lost(exc)
        return None

    def _take_file(self, name: str) -> int | None:
        """The memory file `name` ("half", "part"), handed to whoever closes it."""
        attribute = f"_{name}_file"
        file: int | None = getattr(self, attribute)
        setattr(self, attribute, None)
        return file

    def replay(self, part: TraceIndex, steps: int) -> Callable[[], ReplaySummary | None]:
        """Start replaying `part` (a TraceIndex whose part to replay is chosen: replay.window) in
        the helper; call the result for the ReplaySummary."""
        from gpudoctor.replay.scenarios import replay_or_error

        if self._conn is not None:
            try:
                self._conn.send(("replay", steps, _sent(part, self._take_file("part"))))
                return lambda: self._replay_result(part, steps)
            except (OSError, ValueError) as exc:
                self._lost(exc)
        return lambda: replay_or_error(part, steps)

    def _replay_result(self, part: TraceIndex, steps: int) -> ReplaySummary | None:
        from gpudoctor.session import ReplaySummary

        if self._conn is not None:
            try:
                status, summary = self._conn.recv()
                if status == "replay":
                    return summary if isinstance(summary, ReplaySummary) else None
                # "unread": the part could not be read there (trace_share): replayed here
            except (EOFError, OSError) as exc:
                code = self._lost(exc)
                return ReplaySummary(steps=steps,
                                     error=f"the replay's process ended without a result (exit code {code})")
        from gpudoctor.replay.scenarios import replay_or_error

        return replay_or_error(part, steps)

    def render_ahead(self, report: Mapping[str, Any], fmt: str) -> bool:
        """Begin rendering `report` in `fmt` in the helper (one of AHEAD_FORMATS, the replay done,
        when the helper renders nothing else) while this process renders the others; `render`
        of the same report takes the text. Whether it began."""
        if self._conn is None or self.formats or fmt not in AHEAD_FORMATS or fmt in self._ahead:
            return False
        try:
            self._conn.send(("render", dict(report), fmt))
        except (OSError, ValueError) as exc:
            self._lost(exc)
            return False
        self._ahead.append(fmt)
        return True

    def render(self, report: Mapping[str, Any], fmt: str) -> str:
        """The text of `report` in `fmt`: begun by render_ahead, rendered in the helper (its
        formats), else here."""
        answer = self._answer(fmt) if fmt in self._ahead or fmt in self._answers else None
        if answer is None and self._conn is not None and fmt in self.formats:
            try:
                self._read_ahead()  # the answers come in the order asked
                self._conn.send(("render", dict(report), fmt))
                answer = self._conn.recv()
            except (EOFError, OSError) as exc:  # the process died: render here
                self._lost(exc)
        if answer is not None:
            status, text = answer
            if status == "ok":
                return text
            raise RuntimeError(text)  # the renderer's own error, as it would have been raised here
        from gpudoctor import reports

        return reports.render(report, fmt, fail_on=self.fail_on)

    def _answer(self, fmt: str) -> tuple[str, str] | None:
        """The helper's answer for `fmt` asked by render_ahead (None: lost), taken once."""
        if fmt in self._ahead:
            self._read_ahead(until=fmt)
        return self._answers.pop(fmt, None)

    def _read_ahead(self, until: str | None = None) -> None:
        """Read the answers to render_ahead, in the order asked (up to `until`'s)."""
        while self._ahead and self._conn is not None:
            fmt = self._ahead.pop(0)
            try:
                self._answers[fmt] = self._conn.recv()
            except (EOFError, OSError) as exc:
                self._lost(exc)
                return
            if fmt == until:
                return

    def _lost(self, exc: BaseException) -> int | None:
        log.debug("helper process lost: %s", exc)
        self._ahead.clear()
        process = self._process
        self.close()
        return process.exitcode if process is not None else None

    def close(self) -> None:
        for name in ("half", "part"):
            file = self._take_file(name)
            if file is not None:
                os.close(file)
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                pass
            self._conn.close()
            self._conn = None
        if self._process is not None:
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._process = None

    def __enter__(self) -> Helper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(conn: Any, formats: tuple[str, ...], fail_on: str | None, trace: Path | None,
           files: tuple[int | None, int | None] = (None, None)) -> None:
    import signal

    from gpudoctor import reports

    # Ctrl-C reaches the whole process group: the main process answers it (its message, its
    # exit code) and ends this one; here it would only print a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    half_file, part_file = files

    if trace is not None and _splits(trace):
        from gpudoctor.collectors.trace_decode import decode_rest

        try:
            conn.send(("decoded", _sent(decode_rest(trace), half_file)))
        except (BrokenPipeError, EOFError):
            return
    else:
        for fmt in formats:
            reports.renderer(fmt)  # the imports, while the parent decodes
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        try:
            if request[0] == "replay":
                _, steps, message = request
                part = _received(message, part_file)
                part_file = None  # closed: read once
                if part is None:  # not readable: the main process replays it (Helper._replay_result)
                    conn.send(("unread", None))
                    continue
                conn.send(("replay", _replay(part, steps)))
                _import_renderers(AHEAD_FORMATS)  # while the report is judged there
            else:
                _, report, fmt = request
                try:
                    conn.send(("ok", reports.render(report, fmt, fail_on=fail_on)))
                except Exception as exc:  # noqa: BLE001  # the caller logs it and keeps the other files
                    conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except (BrokenPipeError, EOFError):
            return


def _import_renderers(formats: tuple[str, ...]) -> None:
    """Import the renderers of `formats` (one that fails says so when asked to render)."""
    from gpudoctor import reports

    for fmt in formats:
        try:
            reports.renderer(fmt)
        except Exception as exc:  # noqa: BLE001
            log.debug("renderer %s not imported: %s", fmt, exc)


def _sent(index: TraceIndex | None, file: int | None) -> Any:
    """What to send of `index`: where its columns lie in the memory file `file`, written there
    (trace_share), or the index itself (pickled) when there is no file or it fails. `file`
    is closed: the other process holds its own copy."""
    if file is None:
        return index
    try:
        if index is None:
            return None
        from gpudoctor.collectors.trace_share import export

        return export(index, file) or index
    finally:
        os.close(file)


def _received(message: Any, file: int | None) -> TraceIndex | None:
    """The TraceIndex `message` carries: itself, or read from the memory file `file` (a
    trace_share.SharedIndex); None when it cannot be read. `file` is closed (a map holds it)."""
    from gpudoctor.collectors.trace_share import SharedIndex, restore

    try:
        if isinstance(message, SharedIndex):
            return restore(message, file) if file is not None else None
        return message  # type: ignore[no-any-return]
    except (OSError, ValueError) as exc:
        log.debug("the trace index sent not read: %s", exc)
        return None
    finally:
        if file is not None:
            os.close(file)


def _splits(trace: Path) -> bool:
    from gpudoctor.collectors.trace_decode import split_point

    return split_point(trace) is not None


def _replay(part: TraceIndex, steps: int) -> ReplaySummary | None:
    from gpudoctor.collectors.trace_decode import gc_paused
    from gpudoctor.replay.scenarios import replay_or_error

    with gc_paused():
        return replay_or_error(part, steps)
