"""A profiler trace decoded once, streamed, into the few fields gpudoctor reads: a TraceIndex.

``json.loads`` of a Kineto trace builds a dict for every event and every ``args`` (about
1.2 KiB an event, five times the file). Here the ``traceEvents`` array is cut into
chunks of whole events as the (gzip) stream is read, and each chunk is decoded by
msgspec into typed ``Complete`` structs holding only the fields used (kernel launch
arguments, shapes and the rest are never materialised). Each chunk's events are then
sorted by category into columns (EventColumns: numpy arrays, codes into tables of the
names and ids, lists of correlation ids; about 100 bytes an event) that the statistics,
the hotspots and the replay read; the chunk's structs are freed, and events nothing
reads (flow arrows, metadata, overhead) are dropped at once.

A plain file of SPLIT_MIN_BYTES or more is decoded in two halves when a helper process
can take the second (split_point, decode_rest; gpudoctor.run.analyze_helper): the halves' columns
are joined in file order, with the same result as one pass.

A chunk boundary is a ``},`` between two events: a guess that a string or a nested
object can fool, but then the chunk is no valid JSON and decoding it fails. Any such
surprise (an odd layout, a value of an unexpected type, a number out of range) makes
the reader start again on the plain path (``json.loads`` of the bounded bytes), which
gives the same result with the same limits and messages, only slower.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import gzip
import logging
import math
import mmap
import operator
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast, get_args

import msgspec
import numpy as np

from gpudoctor.base.bounded import InputTooLarge
from gpudoctor.collectors import trace_file
from gpudoctor.collectors.trace_file import load_trace, trace_events

log = logging.getLogger(__name__)

CHUNK_BYTES = 512 << 10  # decode this much of the event array at a time: its events stay in the caches while sorted
HEAD_MAX_BYTES = 64 << 20  # no "traceEvents" key in this much: not Kineto's layout
HEAD_SCAN_BYTES = 1 << 20  # metadata before the events longer than this: read the plain way
# kinds of complete events, by lower-cased category
GPU_KERNEL, GPU_COPY, GPU_SET, API, OP, ANNOTATION, FRAME, TRACE, OTHER = range(9)
GPU_KINDS = {GPU_KERNEL: "k", GPU_COPY: "c", GPU_SET: "s"}
_CATEGORY_KINDS = {
    "kernel": GPU_KERNEL, "gpu_memcpy": GPU_COPY, "memcpy": GPU_COPY, "gpu_memset": GPU_SET, "memset": GPU_SET,
    "cuda_runtime": API, "cuda_driver": API, "runtime": API, "driver": API,
    "cpu_op": OP, "operator": OP, "user_annotation": ANNOTATION, "python_function": FRAME, "trace": TRACE,
}
_NEXT_EVENT = re.compile(rb"\s*\{")
_EVENT_CUT = re.compile(rb"\},\s*\{")
SPLIT_MIN_BYTES = 32 << 20  # a plain trace this large is decoded in two halves when a helper process can take one
MAX_CUT_TRIES = 16
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


# the Chrome trace format's event phases; any other value (or none) does not decode, and the
# trace is read the plain way
Phase = Literal["X", "B", "E", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "N", "O", "D", "M", "V", "v", "R",
                "c", "(", ")"]


class Args(msgspec.Struct, gc=False):
    """The ``args`` fields read; UNSET tells an absent key from a null one."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    # an autograd node's number: a forward operator's, and its backward function's (evaluate_function)
    sequence: Any = msgspec.field(default=None, name="Sequence number")
    device: Any = msgspec.UNSET
    stream: Any = msgspec.UNSET
    bytes: Any = None


class Event(msgspec.Struct, gc=False):
    """One trace event, the fields read. ``ts``/``dur`` are finite floats or None (absent,
    or not a number); ``name`` a string or None. ``kind`` and ``pos`` are set when indexed
    (their JSON names cannot occur in a trace: never decoded)."""

    ph: Phase | None = None
    cat: Any = ""
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: Any = None
    tid: Any = None
    args: Args | None = None
    kind: int = msgspec.field(default=OTHER, name="\u2063kind")
    pos: int = msgspec.field(default=0, name="\u2063pos")

    @property
    def thread(self) -> tuple[Any, Any]:
        return (self.pid, self.tid)

    @property
    def device(self) -> Any:
        device = self.args.device if self.args is not None else msgspec.UNSET
        return self.pid if device is msgspec.UNSET else device

    @property
    def stream(self) -> Any:
        stream = self.args.stream if self.args is not None else msgspec.UNSET
        return self.tid if stream is msgspec.UNSET else stream

    @property
    def correlation(self) -> Any:
        return self.args.correlation if self.args is not None else None

    @property
    def external_id(self) -> Any:
        return self.args.external_id if self.args is not None else None


class Complete(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event (``ph`` "X") as decoded: the fields Event has before it is indexed.
    Events of the other phases decode as empty structs of their own (`_Decoded`): their
    fields are skipped, never made into objects (a third of a trace are flow arrows)."""

    cat: Any = ""
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: Any = None
    tid: Any = None
    args: Args | None = None


# an event of any phase, told by its "ph" (the first key in what Kineto writes: found at once)
_OTHER_PHASES = tuple(msgspec.defstruct(f"_Phase{ord(phase)}", [], tag_field="ph", tag=phase, gc=False)
                      for phase in get_args(Phase) if phase != "X")
if TYPE_CHECKING:
    _Decoded = Complete
else:
    _Decoded = functools.reduce(operator.or_, _OTHER_PHASES, Complete)  # Complete | _Phase66 | ...


class _Meta(msgspec.Struct, gc=False):
    """The top level: what `analyze` reads besides the events."""

    traceEvents: list[_Decoded] | None = None
    host_name: Any = None
    cuda_runtime_version: Any = None
    deviceProperties: Any = None


class Table(dict):  # type: ignore[type-arg]
    """Distinct values, each with a code (0, 1, ... as first met): one copy of each name, id
    or category however many events carry it. Values are told apart as dict keys are (so 1,
    1.0 and True are one value); an unhashable one (a list or an object where an id belongs, in a
    hostile file) stands as its text, a string id like a Chrome trace's "Spans": everything
    downstream may hash the ids it reads."""

    def __init__(self) -> None:
        super().__init__()
        self.distinct: list[Any] = []

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self.distinct)
        self.distinct.append(key)
        return code

    def encode(self, values: list[Any]) -> np.ndarray:
        try:
            return np.fromiter(map(self.__getitem__, values), dtype=np.int32, count=len(values))
        except TypeError:  # an unhashable value
            return np.array([self._code(v) for v in values], dtype=np.int32)

    def _code(self, value: Any) -> int:
        try:
            return self[value]  # type: ignore[no-any-return]
        except TypeError:
            return self[repr(value)[:MAX_ID_TEXT]]  # type: ignore[no-any-return]

    def decode(self, codes: np.ndarray) -> list[Any]:
        values = self.distinct
        return [values[i] for i in codes.tolist()]

    def __reduce__(self) -> Any:
        return (_table, (self.distinct,))


def _table(values: list[Any]) -> Table:
    table = Table()
    table.encode(values)
    table.distinct = list(values)  # merged keys (1 and 1.0) kept as they were
    return table


_ENCODED = ("name", "cat", "pid", "tid", "device", "stream")  # codes into the index's tables
_ARRAYS = ("kind", "pos", "ts", "dur", "has_args", *_ENCODED)
_LISTS = ("correlation", "external_id", "sequence", "bytes")  # Ids: int64 arrays, or values of any type as decoded
_DTYPES = {"kind": np.int8, "pos": np.int64, "ts": np.float64, "dur": np.float64, "has_args": np.bool_}

NO_ID = int(np.iinfo(np.int64).min)  # an absent (or null) value in an int64 Ids column
# a column of values read from `args` (correlation and External ids, copied bytes): int64 with
# NO_ID for None when every value is a plain int (or None) that fits, as a real trace's are (no
# object per value; the statistics match ids with numpy); else a list of the values as decoded
Ids = np.ndarray | list[Any]


def ids(values: list[Any]) -> Ids:
    """The Ids column of `values` (as decoded, None for absent)."""
    types = set(map(type, values))
    if not types <= {int, type(None)}:
        return values  # a float, a bool, a string: kept as they are
    try:
        if type(None) not in types:
            column = np.fromiter(values, dtype=np.int64, count=len(values))
            return values if NO_ID in column else column
        absent = values.count(None)
        if absent == len(values):
            return no_ids(absent)
        column = np.array([NO_ID if v is None else v for v in values], dtype=np.int64)
    except OverflowError:
        return values
    return column if int(np.count_nonzero(column == NO_ID)) == absent else values


def no_ids(count: int) -> np.ndarray:
    """An Ids column of `count` absent values."""
    return np.full(count, NO_ID, dtype=np.int64)


def id_list(column: Ids) -> list[Any]:
    """The values of an Ids column (None for absent)."""
    if isinstance(column, list):
        return column
    return [None if v == NO_ID else v for v in column.tolist()]


def id_at(column: Ids, i: int) -> Any:
    """One value of an Ids column (None for absent)."""
    value = column[i]
    if isinstance(column, list):
        return value
    return None if value == NO_ID else int(value)


def id_rows(column: Ids, rows: np.ndarray) -> Ids:
    """The Ids at `rows` (positions or a mask)."""
    if isinstance(column, np.ndarray):
        picked: np.ndarray = column[rows]
        return picked
    picks = np.flatnonzero(rows).tolist() if rows.dtype == np.bool_ else rows.tolist()
    return [column[i] for i in picks]


def _joined(columns: list[Ids]) -> Ids:
    """Ids columns one after the other (arrays while all are)."""
    if all(isinstance(column, np.ndarray) for column in columns):
        return np.concatenate(columns) if columns else no_ids(0)
    values: list[Any] = []
    for column in columns:
        values += id_list(column)
    return values


class EventColumns:
    """One list of a TraceIndex (its GPU events, CUDA calls, operators or Python frames) as
    columns, file order: numpy arrays of the kinds, positions, times, and codes of the names,
    categories, process, thread, device and stream ids into the index's `tables` (one per
    field); the correlation and External ids and the copied bytes as Ids (int64 arrays while
    they are plain ints).

    Indexing or iterating gives Events, made on demand (for the few events looked at one
    by one, and for the replay's part)."""

    kind: np.ndarray
    pos: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    has_args: np.ndarray  # the event had an args object
    name: np.ndarray
    cat: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    device: np.ndarray  # the args' (UNSET when absent)
    stream: np.ndarray
    correlation: Ids
    external_id: Ids
    sequence: Ids  # the operators' autograd sequence numbers
    bytes: Ids

    def __init__(self, tables: dict[str, Table]) -> None:
        self.tables = tables  # one per encoded field, the index's
        self._parts: list[dict[str, Any]] = []
        self._length = 0

    def __getattr__(self, field: str) -> Any:  # a column asked for while parts are pending
        if field in _ARRAYS or field in _LISTS:
            self._join()
            return self.__dict__[field]
        raise AttributeError(field)

    def append(self, part: dict[str, Any]) -> None:
        """Add a part (a column's values per field, as the fields' types)."""
        for field in (*_ARRAYS, *_LISTS, "_resolved"):
            self.__dict__.pop(field, None)
        self._parts.append(part)
        self._length += len(part["ts"])

    def _join(self) -> None:
        parts, self._parts = self._parts, []
        columns = self.__dict__
        for field in _ARRAYS:
            arrays = [part[field] for part in parts]
            if field in columns:
                arrays.insert(0, columns[field])
            columns[field] = np.concatenate(arrays) if arrays else np.zeros(0, dtype=_DTYPES.get(field, np.int32))
        for field in _LISTS:
            joined = [part[field] for part in parts]
            if field in columns:
                joined.insert(0, columns[field])
            columns[field] = _joined(joined)

    def __len__(self) -> int:
        return self._length

    def __getstate__(self) -> dict[str, Any]:
        self._join()
        return {key: value for key, value in self.__dict__.items() if key != "_resolved"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def take(self, rows: np.ndarray) -> EventColumns:
        """The events at `rows` (positions or a mask), same tables."""
        chosen = EventColumns(self.tables)
        part: dict[str, Any] = {field: getattr(self, field)[rows] for field in _ARRAYS}
        for field in _LISTS:
            part[field] = id_rows(getattr(self, field), rows)
        chosen.append(part)
        return chosen

    def values(self, field: str) -> list[Any]:
        """An encoded field's values (names, pids, ...), one per event."""
        return self.tables[field].decode(getattr(self, field))

    def value(self, field: str, i: int) -> Any:
        return self.tables[field].distinct[getattr(self, field)[i]]

    def resolved(self, field: str, fallback: str) -> list[Any]:
        """Event.device (field "device", fallback "pid") or Event.stream ("stream", "tid") of
        each event: the args' value when the key is there, else the event's own. Made once (the
        statistics and the replay ask several times): not to be changed."""
        made: dict[tuple[str, str], list[Any]] = self.__dict__.setdefault("_resolved", {})
        values = made.get((field, fallback))
        if values is None:
            values = self.values(field)
            if msgspec.UNSET in values:
                own = self.values(fallback)
                values = [own[i] if v is msgspec.UNSET else v for i, v in enumerate(values)]
            made[(field, fallback)] = values
        return values

    @property
    def names(self) -> list[str]:
        return self.values("name")

    @property
    def pids(self) -> list[Any]:
        return self.values("pid")

    @property
    def tids(self) -> list[Any]:
        return self.values("tid")

    def __getitem__(self, i: int) -> Event:
        value = self.value
        args = Args(correlation=id_at(self.correlation, i), external_id=id_at(self.external_id, i),
                    sequence=id_at(self.sequence, i), device=value("device", i), stream=value("stream", i),
                    bytes=id_at(self.bytes, i)) if self.has_args[i] else None
        return Event(ph="X", cat=value("cat", i), name=value("name", i), ts=float(self.ts[i]),
                     dur=float(self.dur[i]), pid=value("pid", i), tid=value("tid", i), args=args,
                     kind=int(self.kind[i]), pos=int(self.pos[i]))

    def __iter__(self) -> Iterator[Event]:
        return map(self.__getitem__, range(len(self)))


MAX_TIME_US = float(2**53)  # the last whole microsecond float64 holds (the year 2255 since the epoch)
MAX_ID_TEXT = 200  # an id that is a list or an object stands as this much of its text

# which kinds each list holds
_GROUPS = {"gpu": (GPU_KERNEL, GPU_COPY, GPU_SET), "api": (API,), "ops": (OP, ANNOTATION), "frames": (FRAME,)}


class TraceIndex:
    """The well-formed complete events of a trace, by kind, in file order (EventColumns); and its metadata."""

    def __init__(self) -> None:
        self.events = 0  # well-formed complete events (ph "X")
        self.malformed = 0  # complete events without a name, a time or a duration in [0, MAX_TIME_US]
        self.first, self.last = float("inf"), float("-inf")  # of the activity (the profiler's own span left out)
        # each field its own table: a thread 7.0 and a stream 7 stay what they are
        self.tables = {field: Table() for field in _ENCODED}
        self.gpu = EventColumns(self.tables)  # kernels, copies, memsets
        self.api = EventColumns(self.tables)  # CUDA runtime and driver calls
        self.ops = EventColumns(self.tables)  # operators and record_function ranges
        self.frames = EventColumns(self.tables)  # Python functions
        self.meta: dict[str, Any] = {}
        self.decoded = 0  # JSON events decoded, of any phase (held to the limit)
        self.part: tuple[int, str] | None = None  # a long window's part to replay: (its steps, what part)
        self._position = 0
        self._category_kinds: list[int] = []

    @property
    def strings(self) -> Table:
        """The names' table."""
        return self.tables["name"]

    def groups(self) -> dict[str, EventColumns]:
        return {"gpu": self.gpu, "api": self.api, "ops": self.ops, "frames": self.frames}

    def _kinds(self, categories: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """The categories' codes and the kind of each."""
        table = self.tables["cat"]
        codes = table.encode(categories)
        known = self._category_kinds
        for category in table.distinct[len(known):]:
            known.append(_CATEGORY_KINDS.get(str(category).lower(), OTHER))
        return codes, np.array(known, dtype=np.int8)[codes]

    def add(self, decoded: list[Any]) -> None:
        """Sort a batch of decoded events (Complete structs, and those of other phases, dropped
        here) into the columns (whole-list passes, no loop per event)."""
        events: list[Complete] = [e for e in decoded if type(e) is Complete]
        count = len(events)
        if not count:
            return
        names = [e.name for e in events]
        ts, dur = _floats([e.ts for e in events]), _floats([e.dur for e in events])
        # NaN (no number) fails both; so does a time no clock gives, where float64 holds no whole microseconds
        valid = (np.abs(ts) <= MAX_TIME_US) & (dur >= 0) & (dur <= MAX_TIME_US)
        if None in names:
            valid &= np.fromiter(map(operator.is_not, names, repeat(None)), dtype=bool, count=count)
        well_formed = int(valid.sum())
        self.events += well_formed
        self.malformed += count - well_formed
        categories, kinds = self._kinds([e.cat for e in events])
        active = valid & (kinds != TRACE)  # the profiler's own span is no activity
        if active.any():
            self.first = min(self.first, float(ts[active].min()))
            self.last = max(self.last, float((ts + dur)[active].max()))
        kept = active & (kinds != OTHER)
        if not kept.any():
            return
        position = self._position + np.cumsum(kept) - 1
        self._position += int(kept.sum())
        # the kept events grouped (gpu, api, ops, frames), file order in each: their fields taken
        # in one pass each, and each table meets the values in the order a pass per group gave
        group = np.where(kept, _GROUP_OF_KIND[kinds], len(_GROUPS))
        counts = np.bincount(group, minlength=len(_GROUPS) + 1)[:len(_GROUPS)].tolist()
        rows = np.argsort(group, kind="stable")[:sum(counts)].tolist()
        chosen = _picked(events, rows)
        name_codes = self.strings.encode(_picked(names, rows))
        tables = self.tables
        pid_codes = tables["pid"].encode([e.pid for e in chosen])
        tid_codes = tables["tid"].encode([e.tid for e in chosen])
        args = [e.args for e in chosen]
        if None in args:
            has_args = np.fromiter(map(operator.is_not, args, repeat(None)), dtype=bool, count=len(args))
            present = [a if a is not None else _NO_ARGS for a in args]
        else:
            has_args = np.ones(len(args), dtype=bool)
            present = cast("list[Args]", args)
        gpu_end, api_end, ops_end = counts[0], counts[0] + counts[1], counts[0] + counts[1] + counts[2]
        correlation = [a.correlation for a in present[:api_end]]  # gpu events and calls
        external = [a.external_id for a in present[:ops_end]]  # all but the Python frames
        sequence = [a.sequence for a in present[api_end:ops_end]]  # the operators only
        low = 0
        for number, name in enumerate(_GROUPS):
            n = counts[number]
            high = low + n
            if not n:
                continue
            mine = group == number
            nothing = no_ids(n)
            part: dict[str, Any] = {
                "kind": kinds[mine], "pos": position[mine], "ts": ts[mine], "dur": dur[mine],
                "name": name_codes[low:high], "cat": categories[mine], "pid": pid_codes[low:high],
                "tid": tid_codes[low:high], "has_args": has_args[low:high],
                "correlation": ids(correlation[low:high]) if high <= api_end else nothing,
                "external_id": ids(external[low:high]) if high <= ops_end else nothing,
                "sequence": ids(sequence) if name == "ops" else nothing,
            }
            if name == "gpu":
                gpu_args = present[:gpu_end]
                part["bytes"] = ids([a.bytes for a in gpu_args])
                part["device"] = tables["device"].encode([a.device for a in gpu_args])
                part["stream"] = tables["stream"].encode([a.stream for a in gpu_args])
            else:
                part["bytes"] = nothing
                part["device"] = np.full(n, tables["device"][msgspec.UNSET], dtype=np.int32)
                part["stream"] = np.full(n, tables["stream"][msgspec.UNSET], dtype=np.int32)
            getattr(self, name).append(part)
            low = high

    def subset(self, rows: Mapping[str, np.ndarray]) -> TraceIndex:
        """A TraceIndex of the events at `rows` of each list (masks or positions; same tables and
        metadata; `events` counts them, `first` and `last` are this index's)."""
        chosen = TraceIndex()
        chosen.tables = self.tables
        for group, columns in self.groups().items():
            setattr(chosen, group, columns.take(rows[group]))
        chosen.events = sum(len(columns) for columns in chosen.groups().values())
        chosen.first, chosen.last, chosen.meta = self.first, self.last, self.meta
        chosen._position = self._position
        return chosen

    def extend(self, other: TraceIndex) -> None:
        """Add the events of `other` (decoded from the rest of the same file) after these."""
        self.events += other.events
        self.malformed += other.malformed
        self.first, self.last = min(self.first, other.first), max(self.last, other.last)
        recode = {field: self.tables[field].encode(other.tables[field].distinct) for field in _ENCODED}
        for group, columns in other.groups().items():
            if not len(columns):
                continue
            part: dict[str, Any] = {field: getattr(columns, field) for field in (*_ARRAYS, *_LISTS)}
            part["pos"] = part["pos"] + self._position
            for field in _ENCODED:
                part[field] = recode[field][part[field]]
            getattr(self, group).append(part)
        self._position += other._position


_NO_ARGS = Args(device=msgspec.UNSET, stream=msgspec.UNSET)
# each kind's place in _GROUPS (len(_GROUPS): none)
_GROUP_OF_KIND = np.array([next((n for n, members in enumerate(_GROUPS.values()) if kind in members), len(_GROUPS))
                           for kind in range(OTHER + 1)], dtype=np.int64)


def _picked(values: list[Any], rows: list[int]) -> list[Any]:
    """[values[i] for i in rows], picked in C."""
    if len(rows) > 1:
        return list(operator.itemgetter(*rows)(values))
    return [values[i] for i in rows]


def _floats(values: list[float | None]) -> np.ndarray:
    """The values as float64, None as NaN."""
    try:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    except TypeError:  # a None among them
        return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def index_events(source: Any) -> TraceIndex:
    """A TraceIndex of already-loaded data: a TraceIndex, Chrome-trace JSON data or an event list."""
    if isinstance(source, TraceIndex):
        return source
    index = TraceIndex()
    events = trace_events(source)
    index.add([e for e in map(_event_from_json, events) if e is not None])
    if isinstance(source, Mapping):
        index.meta = {k: source[k] for k in ("host_name", "cuda_runtime_version", "deviceProperties") if k in source}
    return index


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if number - number == 0 else None  # finite


def _event_from_json(raw: Any) -> Complete | None:
    """The plain path's dict as a Complete event (None for any other), with the meaning the typed decode gives."""
    if not isinstance(raw, dict) or raw.get("ph") != "X":
        return None
    args, parsed = raw.get("args"), None
    if isinstance(args, dict):
        parsed = Args(correlation=args.get("correlation"), external_id=args.get("External id"),
                      sequence=args.get("Sequence number"),
                      device=args.get("device", msgspec.UNSET), stream=args.get("stream", msgspec.UNSET),
                      bytes=args.get("bytes"))
    name = raw.get("name")
    return Complete(cat=raw.get("cat", ""), name=name if isinstance(name, str) else None, ts=_number(raw.get("ts")),
                    dur=_number(raw.get("dur")), pid=raw.get("pid"), tid=raw.get("tid"), args=parsed)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while millions of acyclic objects are made: the
    collector would walk them again and again (it tripled the decode time) for nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Unstreamable(Exception):
    """Not the layout the streaming reader expects: read the plain way."""


def read_trace(path: str | Path, *, own_window: bool = False,
               rest: Callable[[], TraceIndex | None] | None = None) -> TraceIndex:
    """Decode a trace file (JSON or gzip, told apart by content) into a TraceIndex.

    `rest`: another process decodes the second half of the file (decode_rest) and this
    returns it (None if it could not): see split_point. Same limits and one-line
    TraceErrors as trace_file.load_trace (which the plain path uses)."""
    path = Path(path)
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        with open(path, "rb") as fh:
            compressed = fh.read(2) == b"\x1f\x8b"
    except OSError:  # missing, a loop, no permission: the plain path names the reason
        is_dir, compressed = True, False
    if rest is not None:
        split = split_point(path) if not (is_dir or compressed) else None
        if split is None:
            rest()  # nothing was split there either; the answer is taken all the same
        else:
            halves = _halves(path, split, own_window, rest)
            if halves is not None:
                return halves
    if not is_dir:
        try:
            with trace_file.read_errors(path), gc_paused():
                return _streamed(path, compressed, own_window)
        except _Unstreamable as exc:
            log.debug("%s: read whole (%s)", path, exc)
    return index_events(load_trace(path, own_window=own_window))  # the plain path: its checks and messages


class Split(NamedTuple):
    """Where a plain trace file is decoded in two halves, one per process."""

    head: bytes  # up to the event array's key
    start: int  # the offset of the first byte after the array's "["
    cut: int  # the offset of the "}" that ends the first half's last event


def split_point(path: Path) -> Split | None:
    """The Split of a plain (not compressed) trace of SPLIT_MIN_BYTES or more: the first
    ``},`` then ``{`` past the middle of its event array. The same file gives the same
    answer in either process. When that cut lies inside a string, the first half does
    not decode and the file is read whole."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < SPLIT_MIN_BYTES or fh.read(2) == b"\x1f\x8b":
                return None
            fh.seek(0)
            head, _ = _head(iter([fh.read(HEAD_SCAN_BYTES + 64)]))  # the key starts within HEAD_SCAN_BYTES
            start = len(head) + 1
            middle = start + (size - start) // 2
            fh.seek(middle)
            window = fh.read(HEAD_SCAN_BYTES)
    except (OSError, _Unstreamable):
        return None
    found = _EVENT_CUT.search(window)
    return Split(head, start, middle + found.start()) if found else None


def decode_rest(path: str | Path, own_window: bool = False) -> TraceIndex | None:
    """The second half of a trace file at its split_point (its metadata included), for
    read_trace's `rest`; None when the file is not split or that half does not decode."""
    path = Path(path)
    split = split_point(path)
    if split is None:
        return None
    max_bytes, max_events = _limits(own_window)
    try:
        with trace_file.read_errors(path), gc_paused():
            if os.stat(path).st_size > max_bytes:
                return None  # read_trace refuses it
            index = TraceIndex()
            with _mapped(path) as data:
                if data is not None:  # from the "," past the first half's last event
                    lead, decoded = _decode_view(data, split.cut + 1, len(data), index, max_events)
                    _finish(index, split.head, bytearray(data[lead:]), decoded, max_events)
                    return index
            with open(path, "rb") as fh:
                fh.seek(split.cut + 2)  # past the "},"
                buffer, decoded = _decode_events(_blocks(fh), bytearray(b"["), index, max_events)
            _finish(index, split.head, buffer, decoded, max_events)
            return index
    except (_Unstreamable, trace_file.TraceError) as exc:
        log.debug("%s: the second half not decoded (%s)", path, exc)
        return None


def _halves(path: Path, split: Split, own_window: bool, rest: Callable[[], TraceIndex | None]) -> TraceIndex | None:
    """The first half decoded here, joined to the second (`rest`, called unless an error ends
    the reading: no wait for it then); None if either did not decode."""
    max_bytes, max_events = _limits(own_window)
    with trace_file.read_errors(path), gc_paused():
        first = _first_half(path, split, max_bytes, max_events)
    other = rest()
    if first is None or other is None:
        return None
    index, decoded = first
    if decoded + other.decoded > max_events:
        with trace_file.read_errors(path):
            raise _too_many_events(max_events)
    with gc_paused():
        index.extend(other)
    index.meta, index.decoded = other.meta, decoded + other.decoded
    return index


def _first_half(path: Path, split: Split, max_bytes: int, max_events: int) -> tuple[TraceIndex, int] | None:
    index = TraceIndex()
    try:
        if os.stat(path).st_size > max_bytes:
            raise _too_many_bytes(max_bytes)
        with _mapped(path) as data:
            if data is not None:  # from the array's "[" to the "," past the first half's last event
                lead, decoded = _decode_view(data, split.start - 1, split.cut + 1, index, max_events)
                data[split.cut + 1] = 0x5D  # "]"
                with memoryview(data) as view, view[lead:split.cut + 2] as chunk:
                    events = msgspec.json.Decoder(list[_Decoded]).decode(chunk)
                index.add(events)
                return index, decoded + len(events)
        with open(path, "rb") as fh:
            fh.seek(split.start)
            buffer, decoded = _decode_events(_blocks(fh, split.cut + 1 - split.start), bytearray(b"["), index,
                                             max_events)
        buffer += b"]"
        events = msgspec.json.Decoder(list[_Decoded]).decode(buffer)
    except (_Unstreamable, msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.debug("%s: the first half not decoded (%s)", path, exc)
        return None
    index.add(events)
    return index, decoded + len(events)


def _count_events(path: Path, own_window: bool) -> None:
    """Refuse a gzip trace whose content is over the byte limit or holds more than
    MAX_TRACE_EVENTS events (``"ph"`` keys: an over-estimate) before decoding any: a few
    MB on disk can inflate to millions of tiny events."""
    max_bytes, max_events = _limits(own_window)
    size, events, tail = 0, 0, b""
    with gzip.open(path, "rb") as fh:
        while block := fh.read(CHUNK_BYTES):
            size += len(block)
            events += (tail + block[:3]).count(b'"ph"') + block.count(b'"ph"')
            tail = block[-3:]
            if size > max_bytes:
                raise _too_many_bytes(max_bytes)
            if events > max_events:
                raise _too_many_events(max_events)


def _limits(own_window: bool) -> tuple[int, int]:
    scale = trace_file.OWN_WINDOW_SCALE if own_window else 1
    return trace_file.MAX_TRACE_BYTES * scale, trace_file.MAX_TRACE_EVENTS * scale


def _too_many_bytes(max_bytes: int) -> InputTooLarge:
    return InputTooLarge(f"larger than {max_bytes >> 20} MiB: not a profiler trace gpudoctor can read")


def _too_many_events(max_events: int) -> InputTooLarge:
    return InputTooLarge(f"more than {max_events:,} events (JSON objects): far more than a profiler "
                         "trace holds; refused rather than filling memory")


def _blocks(fh: Any, limit: int | None = None) -> Iterator[bytes]:
    """The file's blocks from where it stands (`limit` bytes at most)."""
    while limit is None or limit > 0:
        block = fh.read(CHUNK_BYTES if limit is None else min(CHUNK_BYTES, limit))
        if not block:
            return
        if limit is not None:
            limit -= len(block)
        yield block


def _streamed(path: Path, compressed: bool, own_window: bool) -> TraceIndex:
    """The events chunk by chunk. A plain file is refused by its size before anything is
    read and by its event count as it is decoded (the memory stays bounded by the limit);
    gzip input is counted first (see _count_events)."""
    max_bytes, max_events = _limits(own_window)
    if compressed:
        _count_events(path, own_window)
    elif os.stat(path).st_size > max_bytes:
        raise _too_many_bytes(max_bytes)
    else:
        with _mapped(path) as data:
            if data is not None:
                head, _ = _head(_slices(data))
                index = TraceIndex()
                lead, decoded = _decode_view(data, len(head), len(data), index, max_events)
                _finish(index, head, bytearray(data[lead:]), decoded, max_events)
                return index
    index = TraceIndex()
    with (gzip.open(path, "rb") if compressed else open(path, "rb")) as fh:
        blocks = _blocks(fh)
        head, rest = _head(blocks)
        buffer, decoded = _decode_events(blocks, bytearray(b"[") + rest, index, max_events)
    _finish(index, head, buffer, decoded, max_events)
    return index


@contextlib.contextmanager
def _mapped(path: Path) -> Iterator[mmap.mmap | None]:
    """The file mapped as a private copy (bytes written into it reach neither the file nor
    another process), or None where it cannot be mapped (then it is read block by block)."""
    try:
        with open(path, "rb") as fh:
            mapping = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError) as exc:  # an empty file, no mmap here
        log.debug("%s: not mapped (%s)", path, exc)
        yield None
        return
    try:
        yield mapping
    finally:
        mapping.close()


def _slices(data: mmap.mmap) -> Iterator[bytes]:
    for start in range(0, len(data), CHUNK_BYTES):
        yield data[start:start + CHUNK_BYTES]


def _decode_view(data: mmap.mmap, lead: int, stop: int, index: TraceIndex, max_events: int) -> tuple[int, int]:
    """Decode the whole events of data[lead + 1:stop] into `index`, a chunk at a time, in
    place: the byte before a chunk's first event (the array's ``[``, or the ``,`` after the
    last event decoded) is made its ``[``, and _decode_whole_events makes the ``,`` after its
    last event its ``]`` (a private copy of the file: nothing is copied). (Where the events
    left begin: the ``[`` before them; how many were decoded.)"""
    decoder = msgspec.json.Decoder(list[_Decoded])
    decoded = 0
    end = lead
    released = lead - lead % mmap.PAGESIZE
    while end < stop:
        end = min(max(end, lead) + CHUNK_BYTES, stop)
        data[lead] = 0x5B  # "["
        cut, count = _decode_whole_events(data, decoder, index, lead, end)
        if count:
            lead = cut  # the "," before the next event
            decoded += count
            if decoded > max_events:
                raise _too_many_events(max_events)
            released = _release(data, released, lead)
    data[lead] = 0x5B
    return lead, decoded


def _release(data: mmap.mmap, start: int, lead: int) -> int:
    """Give back the pages decoded, from `start` to the page that holds `lead` (its ``[`` is
    written there: that page stays), so that the file's pages do not stay in memory as the
    decode goes through it. Where the next release starts."""
    until = lead - lead % mmap.PAGESIZE
    if until > start and hasattr(mmap, "MADV_DONTNEED"):
        data.madvise(mmap.MADV_DONTNEED, start, until - start)
    return max(start, until)


def _decode_events(blocks: Iterator[bytes], buffer: bytearray, index: TraceIndex,
                   max_events: int) -> tuple[bytearray, int]:
    """Decode the whole events of `buffer` (``[`` then events) and `blocks` into `index`; (what
    is left undecoded, after its ``[``; how many events were decoded)."""
    decoder = msgspec.json.Decoder(list[_Decoded])
    decoded = 0
    for block in blocks:
        buffer += block
        cut, count = _decode_whole_events(buffer, decoder, index)
        del buffer[1:cut]
        decoded += count
        if decoded > max_events:
            raise _too_many_events(max_events)
    return buffer, decoded


def _finish(index: TraceIndex, head: bytes, buffer: bytearray, decoded: int, max_events: int) -> None:
    """The last events and the metadata: `head` (the file up to the event array's key) then
    `buffer` (the array's ``[``, its last events and the rest of the file)."""
    if b'"traceEvents"' in buffer:
        raise _Unstreamable("a second traceEvents key")
    try:
        meta = msgspec.json.decode(head + bytes(buffer), type=_Meta)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _Unstreamable(f"end: {exc}") from None
    index.decoded = decoded + len(meta.traceEvents or [])
    if index.decoded > max_events:
        raise _too_many_events(max_events)
    index.add(meta.traceEvents or [])
    index.meta = {k: getattr(meta, k) for k in ("host_name", "cuda_runtime_version", "deviceProperties")
                  if getattr(meta, k) is not None}


def _decode_whole_events(buffer: bytearray | mmap.mmap, decoder: msgspec.json.Decoder[Any], index: TraceIndex,
                         start: int = 0, end: int | None = None) -> tuple[int, int]:
    """Decode the events that buffer[start:end] holds whole (after its leading ``[``) into
    `index`; (where the first event not decoded starts, and the ``,`` before it; how many were
    decoded).

    A cut is a ``}`` then ``,`` and the ``{`` of the next event (whitespace between): kernel
    names such as ``{lambda(float)#1}, std::array`` hold the first two. When a string
    fools even that, the chunk does not decode and the previous candidate is tried. The
    chunk is decoded in place: its ``,`` is made the array's ``]`` for the decode (no copy)."""
    end = len(buffer) if end is None else end
    for _ in range(MAX_CUT_TRIES):
        cut = buffer.rfind(b"},", start + 1, end)
        if cut < 0:
            return start + 1, 0
        end = cut
        after = _NEXT_EVENT.match(buffer, cut + 2)
        if after is None:
            continue
        buffer[cut + 1] = 0x5D  # "]"
        view = memoryview(buffer)
        chunk = view[start: cut + 2]
        try:
            events = decoder.decode(chunk)
        except msgspec.ValidationError as exc:
            raise _Unstreamable(f"chunk: {exc}") from None
        except msgspec.DecodeError:
            continue
        finally:
            chunk.release()
            view.release()
            buffer[cut + 1] = 0x2C  # ","
        index.add(events)
        return (after.end() - 1 if isinstance(buffer, bytearray) else cut + 1), len(events)
    raise _Unstreamable("no place to cut the event array")


def _head(blocks: Iterator[bytes]) -> tuple[bytes, bytearray]:
    """The bytes up to the event array's key (``{... "traceEvents":``) and what follows its ``[``."""
    buffer = bytearray()
    for block in blocks:
        buffer += block
        match = _EVENTS_KEY.search(buffer)
        if match:
            if match.start() > HEAD_SCAN_BYTES or not _top_level(bytes(buffer[: match.start()])):
                raise _Unstreamable("traceEvents nested, inside a string or after long metadata")
            return bytes(buffer[: match.end() - 1]), buffer[match.end():]
        if len(buffer) > HEAD_MAX_BYTES:
            break
    raise _Unstreamable("no traceEvents key near the start")


def _top_level(before: bytes) -> bool:
    """Whether a key right after `before` sits in the top-level object (depth 1, outside strings)."""
    depth, in_string, escaped = 0, False, False
    for byte in before:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):
            depth += 1
        elif byte in (0x7D, 0x5D):
            depth -= 1
    return depth == 1 and not in_string
