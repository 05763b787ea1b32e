"""Append-only event files, one per process, flushed often by a daemon thread.

Each line is a small JSON object with at least "k" (kind) and "ts" (time.time() when
it was emitted; for a step, when the step ended: steps are written by the agent's thread).
A crash loses at most the last flush interval. Forked children (DataLoader
workers) get a file of their own: the writer notices the pid change.
"""

import os
import threading
import time

# Loaded at start-up in every process: no `from __future__ import annotations` (it imports
# the __future__ module, which a plain interpreter has not loaded) and no typing at run time.
# The annotations here name builtins only; the others are strings (agent/__init__.py says more).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

FLUSH_INTERVAL_S = 0.2
MAX_BUFFERED = 5000  # events kept in memory if the disk stops accepting them
MAX_UNWRITTEN_BYTES = 4 << 20  # encoded events waiting for a full disk to take them
MAX_RETRY_S = 5.0  # a failing disk is retried at most this often (encoding costs the workload CPU)


# '"name":' for each field name seen: events have a handful of them
_QUOTED_NAMES: "dict[str, str]" = {}
_quote: "Callable[[str], str] | None" = None  # the C string escaper, once loaded


def encode(event: dict[str, object]) -> str:
    """One event as a JSON line, as json.dumps(event, separators=(",", ":")) writes it.

    Flat events are encoded here with the C string escaper, so a process that never imports
    json does not pay for it. The agent's thread encodes each step event of a fast loop (two a
    step: backward and optimizer) while the workload waits for the GIL, so this makes no
    Python call of its own per field: 16.5 us a step event before, 3.2 us now (CPU VM)."""
    quote = _quote or _load_quote()
    parts = []
    for key, value in event.items():
        if type(value) is float and value - value == 0.0:  # finite: inf - inf and nan - nan are nan
            text = repr(value)
        elif type(value) is str:
            text = quote(value)
        elif type(value) is int:
            text = repr(value)
        elif value is None:
            text = "null"
        elif type(value) is bool:
            text = "true" if value else "false"
        else:
            import json

            return json.dumps(event, separators=(",", ":"), default=str)
        name = _QUOTED_NAMES.get(key)
        if name is None:
            name = quote(str(key)) + ":"
            if len(_QUOTED_NAMES) < 256:
                _QUOTED_NAMES[key] = name
        parts.append(name + text)
    return "{" + ",".join(parts) + "}"


def _load_quote() -> "Callable[[str], str]":
    global _quote
    from _json import encode_basestring_ascii

    _quote = encode_basestring_ascii
    return encode_basestring_ascii


class EventWriter:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._buffer: list[dict[str, object]] = []
        self._pid: int | None = None
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file self._fd was opened on
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._periodic: list[Callable[[], object]] = []  # run by the flusher thread (sampling, aggregation)
        self.dropped = 0
        self.write_errors = 0
        self._unwritten = b""  # encoded, not yet on disk (a write failed part-way)
        self._backoff = 0.0
        self._retry_at = 0.0

    # -- public --------------------------------------------------------------
    # The wire layer: any kind, any fields. The typed entry is Agent.emit (one overload per
    # kind, agent/protocol.py); this writer adds "k" and "ts" after the fields.
    def emit(self, kind: str, **fields: object) -> None:
        fields["k"] = kind
        fields.setdefault("ts", time.time())
        self._append([fields])

    def emit_timed(self, kind: str, timed: "Iterable[tuple[float, Mapping[str, object]]]") -> None:
        """Events recorded earlier (steps, written by the agent's thread): (time.time(), fields) each."""
        self._append([{**fields, "k": kind, "ts": ts} for ts, fields in timed])

    def emit_now(self, kind: str, **fields: object) -> None:
        """Write one event at once, without starting the flusher thread (start-up path)."""
        self._ensure_process()
        fields["k"] = kind
        fields.setdefault("ts", time.time())
        with self._lock:
            self._buffer.append(fields)
        self.flush()

    def ensure_running(self) -> None:
        """Start the flusher thread in this process if it is not running (e.g. in a fork)."""
        self._ensure_process()
        self._ensure_thread()

    def add_periodic(self, fn: "Callable[[], object]") -> None:
        self._periodic.append(fn)

    def flush(self, force: bool = False) -> None:
        self._ensure_process()
        with self._lock:
            if not self._buffer and not self._unwritten:
                return
            if not force and self._retry_at and time.monotonic() < self._retry_at:
                return  # the disk failed lately: keep buffering (bounded), retry later
            if self._buffer:
                lines = []
                for event in self._buffer:
                    try:
                        lines.append(encode(event))
                    except (TypeError, ValueError):
                        self.dropped += 1
                self._buffer.clear()
                data = ("\n".join(lines) + "\n").encode("utf-8", "replace") if lines else b""
                if len(self._unwritten) + len(data) > MAX_UNWRITTEN_BYTES:
                    self.dropped += len(lines)
                else:
                    self._unwritten += data
            try:
                self._write()
                self._backoff = self._retry_at = 0.0
            except OSError:
                # disk full or directory gone: keep what was not written (bounded) and the
                # workload running; what was written stays written (no duplicate lines)
                self.write_errors += 1
                self._backoff = min(MAX_RETRY_S, max(FLUSH_INTERVAL_S, self._backoff * 2))
                self._retry_at = time.monotonic() + self._backoff

    def close(self) -> None:
        self._stopped = True
        try:
            self.flush(force=True)
        except Exception:  # noqa: BLE001 (closing never raises into the workload)
            pass

    # -- internals -----------------------------------------------------------
    def _append(self, events: "list[dict[str, object]]") -> None:
        self._ensure_process()
        with self._lock:
            room = MAX_BUFFERED - len(self._buffer)
            if len(events) > room:
                self.dropped += len(events) - max(room, 0)
                events = events[:max(room, 0)]
            self._buffer.extend(events)
        self._ensure_thread()

    def _write(self) -> None:
        fd = self._own_fd()
        while self._unwritten:
            written = os.write(fd, self._unwritten)
            self._unwritten = self._unwritten[written:]

    def _own_fd(self) -> int:
        """Our event file's descriptor, proven ours just before the write.

        The workload owns the descriptor table: it may close every descriptor
        (os.closerange(3, 1024), a daemonising library) and open its own file, which then
        gets our old number. So the number is never trusted alone: it must still name the
        file we opened (same device and inode), else it is left alone (never closed: it is
        the workload's now) and the file is opened again by its path."""
        fd = self._fd
        if fd is not None:
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) == self._identity:
                    return fd
            except OSError:
                pass
            self._fd = None
        path = os.path.join(self.directory, "events-%d.jsonl" % os.getpid())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600)
        st = os.fstat(fd)
        self._fd, self._identity = fd, (st.st_dev, st.st_ino)
        return fd

    def _ensure_process(self) -> None:
        pid = os.getpid()
        if pid != self._pid:
            # new process (first use, or a fork): the parent's buffer and file are not ours
            self._pid = pid
            self._fd = None
            self._thread = None
            self._lock = threading.Lock()
            self._buffer = []
            self._unwritten = b""
            self._backoff = self._retry_at = 0.0

    def _ensure_thread(self) -> None:
        if self._thread is not None or self._stopped:
            return
        thread = threading.Thread(target=self._run, name="gpudoctor-agent", daemon=True)
        self._thread = thread
        try:
            thread.start()
        except RuntimeError:  # interpreter shutting down
            self._thread = None

    def _run(self) -> None:
        pid = os.getpid()
        while not self._stopped and os.getpid() == pid:
            time.sleep(FLUSH_INTERVAL_S)
            for fn in list(self._periodic):
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 (a failing periodic task is dropped and reported)
                    self._periodic.remove(fn)
                    self.emit("agent_error", where=getattr(fn, "__name__", "periodic"), error=repr(exc)[:300])
            try:
                self.flush()
            except Exception:  # noqa: BLE001 (the next interval flushes again)
                pass
