"""The streamed, typed decode (trace_decode) gives what the plain json.loads path gives,
whatever the chunk boundaries, and refuses oversized input while it reads."""

from __future__ import annotations

import contextlib
import gzip
import json
from pathlib import Path

import msgspec
import numpy as np
import pytest

from gpudoctor.base.bounded import InputTooLarge
from gpudoctor.collectors import trace_decode, trace_file
from gpudoctor.collectors.trace_decode import decode_rest, index_events, read_trace
from gpudoctor.collectors.trace_file import load_trace


def _events(n: int) -> list[dict]:
    """Events whose strings hold what a naive cut would take for event boundaries."""
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    for i in range(n):
        ts = 100.0 + i * 10
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": ts, "dur": 8,
                       "args": {"External id": i + 1, "Input Dims": [[4, 4], [4, 4]],
                                **({"Sequence number": 500 + i} if i % 2 else {})}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
                       "ts": ts + 1, "dur": 3, "args": {"correlation": 1000 + i, "External id": i + 1}})
        name = "void f<{lambda(float)#1}, std::array<char*, 1>>(int) }, {" if i % 3 == 0 else f"gemm_{i % 5}"
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts + 4, "dur": 2.5,
                       "args": {"correlation": 1000 + i, "device": 0, "stream": 7, "grid": [1, 1, 1]}})
        events.append({"ph": "f", "id": 1000 + i, "pid": 0, "tid": 7, "ts": ts + 4, "cat": "ac2g", "name": "ac2g"})
    events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": 1, "tid": 2, "ts": 50, "dur": 1e6})
    return events


def _rows(index: trace_decode.TraceIndex) -> list[tuple]:
    return [(e.kind, e.pos, e.name, e.ts, e.dur, e.pid, e.tid, e.correlation, e.external_id, e.device, e.stream,
             e.args.sequence if e.args is not None else None)
            for e in [*index.gpu, *index.api, *index.ops, *index.frames]]


def _write(path: Path, data: dict, *, indent: int | None = None, compress: bool = False) -> Path:
    text = json.dumps(data, indent=indent).encode()
    path.write_bytes(gzip.compress(text) if compress else text)
    return path


@pytest.mark.parametrize("chunk", [64, 257, 4096, 1 << 20])
@pytest.mark.parametrize("layout", ["compact", "indented", "gzip", "meta_after"])
def test_streamed_decode_equals_the_plain_path(tmp_path: Path, monkeypatch, chunk: int, layout: str) -> None:
    data: dict = {"schemaVersion": 1, "traceEvents": _events(60)}
    if layout == "meta_after":
        data = {"traceEvents": data["traceEvents"], "host_name": "node-7", "cuda_runtime_version": 12040}
    path = _write(tmp_path / "t.json", data, indent=1 if layout == "indented" else None, compress=layout == "gzip")
    monkeypatch.setattr(trace_decode, "CHUNK_BYTES", chunk)
    streamed = read_trace(path)
    plain = index_events(load_trace(path))
    assert _rows(streamed) == _rows(plain)
    assert (streamed.events, streamed.malformed, streamed.first, streamed.last) == \
        (plain.events, plain.malformed, plain.first, plain.last) == (181, 0, 100.0, 100.0 + 59 * 10 + 8)
    assert len(streamed.gpu) == len(streamed.api) == len(streamed.ops) == 60
    # the operators' autograd sequence numbers, where they have one (what tells a loss's backward apart)
    assert trace_decode.id_list(streamed.ops.sequence) == [500 + i if i % 2 else None for i in range(60)]
    if layout == "meta_after":
        assert streamed.meta == {"host_name": "node-7", "cuda_runtime_version": 12040}


def test_a_cut_inside_a_string_is_not_taken(tmp_path: Path, monkeypatch) -> None:
    """Chunks ending inside a kernel name that holds '}, {' decode at the previous real cut."""
    events = _events(40)
    path = _write(tmp_path / "t.json", {"traceEvents": events})
    for chunk in range(40, 400, 23):
        monkeypatch.setattr(trace_decode, "CHUNK_BYTES", chunk)
        index = read_trace(path)
        assert [e.name for e in index.gpu] == [e["name"] for e in events if e.get("cat") == "kernel"]


def test_a_plain_file_with_too_many_events_is_refused_as_it_is_read(tmp_path: Path, monkeypatch) -> None:
    path = _write(tmp_path / "t.json", {"traceEvents": _events(200)})  # 802 events
    monkeypatch.setattr(trace_decode, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(trace_file, "MAX_TRACE_EVENTS", 500)
    with pytest.raises(InputTooLarge, match="more than 500 events"):
        trace_decode._streamed(path, False, False)
    monkeypatch.setattr(trace_file, "MAX_TRACE_EVENTS", 802)
    assert read_trace(path).events == 601  # complete events: 3 per step and the profiler's span


def test_a_gzip_file_with_too_many_events_is_refused_before_decoding(tmp_path: Path, monkeypatch) -> None:
    path = _write(tmp_path / "t.json.gz", {"traceEvents": _events(200)}, compress=True)
    monkeypatch.setattr(trace_file, "MAX_TRACE_EVENTS", 500)

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded before counting")

    monkeypatch.setattr(trace_decode, "_decode_whole_events", no_decode)
    with pytest.raises(InputTooLarge, match="more than 500 events"):
        trace_decode._streamed(path, True, False)


def test_a_plain_file_over_the_byte_limit_is_refused_unread(tmp_path: Path, monkeypatch) -> None:
    path = _write(tmp_path / "t.json", {"traceEvents": _events(20)})
    monkeypatch.setattr(trace_file, "MAX_TRACE_BYTES", 4 << 10)  # 4 KiB: the file is about 7
    with pytest.raises(InputTooLarge, match="larger than 0 MiB"):
        trace_decode._streamed(path, False, own_window=False)
    assert read_trace(path, own_window=True).events == 61  # the agent's own window: three times the limit


def test_an_unknown_phase_is_read_the_plain_way(tmp_path: Path) -> None:
    """Phases decode as shared constants; a value outside the format's list falls back to
    json.loads, with the same events (the unknown one is not a complete event)."""
    events = _events(10)
    events.insert(5, {"ph": "Z", "name": "custom", "ts": 1, "dur": 1, "pid": 1, "tid": 2})
    path = _write(tmp_path / "t.json", {"traceEvents": events})
    index = read_trace(path)
    assert _rows(index) == _rows(index_events(load_trace(path)))
    assert index.events == 31
    assert all(e.ph is index.gpu[0].ph for e in [*index.gpu, *index.api, *index.ops])  # one "X" for all


def _split(path: Path, monkeypatch) -> trace_decode.TraceIndex:
    """read_trace with the second half decoded by decode_rest (here, in this process)."""
    monkeypatch.setattr(trace_decode, "SPLIT_MIN_BYTES", 0)
    asked = []

    def rest():
        asked.append(True)
        return decode_rest(path)

    index = read_trace(path, rest=rest)
    assert asked == [True]  # the other half is always taken, used or not
    return index


@pytest.mark.parametrize("chunk", [257, 1 << 20])
@pytest.mark.parametrize("layout", ["compact", "indented", "meta_after"])
def test_two_halves_decode_as_the_whole(tmp_path: Path, monkeypatch, chunk: int, layout: str) -> None:
    data: dict = {"schemaVersion": 1, "traceEvents": _events(60), "deviceProperties": [{"id": 0, "name": "H200"}]}
    if layout == "meta_after":
        data = {"traceEvents": data["traceEvents"], "host_name": "node-7", "cuda_runtime_version": 12040}
    path = _write(tmp_path / "t.json", data, indent=1 if layout == "indented" else None)
    monkeypatch.setattr(trace_decode, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(trace_decode, "SPLIT_MIN_BYTES", 0)
    split = trace_decode.split_point(path)
    assert split is not None and split.start < split.cut < path.stat().st_size * 0.6
    halves = _split(path, monkeypatch)
    plain = index_events(load_trace(path))
    assert _rows(halves) == _rows(plain)
    assert [e.pos for e in halves.ops] == sorted(e.pos for e in halves.ops)  # file order across the halves
    assert (halves.events, halves.malformed, halves.first, halves.last, halves.decoded) == \
        (plain.events, plain.malformed, plain.first, plain.last, len(data["traceEvents"]))
    assert halves.meta == plain.meta
    assert halves.meta["host_name" if layout == "meta_after" else "deviceProperties"]


def test_a_split_inside_a_string_reads_the_file_whole(tmp_path: Path, monkeypatch, caplog) -> None:
    """A cut inside a kernel name holding '}, {': the first half does not decode, and the
    file is read whole (by this process) with the same events."""
    events = _events(30)
    path = _write(tmp_path / "t.json", {"traceEvents": events})
    text = path.read_bytes()
    inside = text.index(b"}, {", text.index(b"void f<", len(text) // 2))
    real = trace_decode.split_point
    monkeypatch.setattr(trace_decode, "split_point", lambda p: real(p)._replace(cut=inside))  # type: ignore[union-attr]
    with caplog.at_level("DEBUG", logger=trace_decode.__name__):
        index = _split(path, monkeypatch)
    assert "the first half not decoded" in caplog.text
    assert _rows(index) == _rows(index_events(load_trace(path)))


def test_a_lost_second_half_is_decoded_here(tmp_path: Path, monkeypatch) -> None:
    path = _write(tmp_path / "t.json", {"traceEvents": _events(30)})
    monkeypatch.setattr(trace_decode, "SPLIT_MIN_BYTES", 0)
    assert _rows(read_trace(path, rest=lambda: None)) == _rows(read_trace(path))


def test_the_halves_together_are_held_to_the_event_limit(tmp_path: Path, monkeypatch) -> None:
    path = _write(tmp_path / "t.json", {"traceEvents": _events(200)})  # 802 events, about 400 a half
    monkeypatch.setattr(trace_file, "MAX_TRACE_EVENTS", 600)
    with pytest.raises(trace_file.TraceError, match="more than 600 events"):
        _split(path, monkeypatch)


def test_a_gzip_trace_is_not_split(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(trace_decode, "SPLIT_MIN_BYTES", 0)
    path = _write(tmp_path / "t.json.gz", {"traceEvents": _events(30)}, compress=True)
    assert trace_decode.split_point(path) is None
    assert decode_rest(path) is None
    assert _rows(read_trace(path, rest=lambda: None)) == _rows(read_trace(path))


def test_an_index_sent_to_another_process_is_the_same(tmp_path: Path) -> None:
    """A TraceIndex pickles as its columns and tables; a second trace decoded after it joins
    with its codes renumbered into the first's tables."""
    import pickle

    path = _write(tmp_path / "t.json", {"traceEvents": _events(20)})
    index = read_trace(path)
    copy = pickle.loads(pickle.dumps(index))
    assert _rows(copy) == _rows(index)
    other = _write(tmp_path / "u.json", {"traceEvents": [{**e, "pid": 9} if e.get("cat") == "cpu_op" else e
                                                          for e in _events(5)]})
    second = read_trace(other)
    joined = read_trace(path)
    joined.extend(pickle.loads(pickle.dumps(second)))
    shift = len(index.gpu) + len(index.api) + len(index.ops) + len(index.frames)
    for group in ("gpu", "api", "ops", "frames"):
        mine, theirs = getattr(index, group), getattr(second, group)
        assert list(getattr(joined, group)) == [*mine, *(msgspec.structs.replace(e, pos=e.pos + shift) for e in theirs)]
    assert {e.pid for e in joined.ops} == {1, 9}
    assert (joined.events, joined.first, joined.last) == (index.events + second.events, index.first, index.last)


@pytest.mark.parametrize("chunk", [64, 257, 1 << 20])
def test_a_mapped_file_decodes_as_the_blocks_read_and_is_left_as_it_was(tmp_path: Path, monkeypatch, chunk) -> None:
    """A plain file is decoded in a private map of it, a ``[`` and a ``]`` written around each
    chunk: the same events as reading it block by block, and the file is not changed."""
    path = _write(tmp_path / "t.json", {"traceEvents": _events(60), "host_name": "node-7"}, indent=1)
    before = path.read_bytes()
    monkeypatch.setattr(trace_decode, "CHUNK_BYTES", chunk)
    mapped, halves = read_trace(path), _split(path, monkeypatch)
    assert path.read_bytes() == before
    monkeypatch.setattr(trace_decode, "_mapped", _not_mapped)
    blocks = read_trace(path)
    assert _rows(mapped) == _rows(halves) == _rows(blocks) == _rows(_split(path, monkeypatch))
    assert mapped.meta == blocks.meta == {"host_name": "node-7"}


@contextlib.contextmanager
def _not_mapped(path: Path):
    yield None


def test_ids_are_int64_only_while_every_value_is_a_plain_int_or_absent() -> None:
    """An Ids column holds what was decoded: int64 (NO_ID for None) when nothing is lost, else the list."""
    from gpudoctor.collectors.trace_decode import NO_ID, id_at, id_list, id_rows, ids

    for values in ([3, 1, 2], [None, 5, None], [None, None], []):
        column = ids(values)
        assert isinstance(column, np.ndarray) and column.dtype == np.int64
        assert id_list(column) == values and [id_at(column, i) for i in range(len(values))] == values
        assert all(type(v) in (int, type(None)) for v in id_list(column))
    for values in ([1, 2.0], [True, 2], ["7", 7], [1, 2**63], [NO_ID, None], [[1], 2]):
        assert ids(values) is values  # a float, a bool, a string, too large, the marker itself, a list
    assert id_list(id_rows(ids([4, None, 6]), np.array([True, False, True]))) == [4, 6]
    assert id_rows([4.0, None, 6], np.array([2, 0])) == [6, 4.0]
