"""A decoded trace handed over through a memory file is the trace pickled, column for column:
the second half of a long trace, and the part of it to replay."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from test_trace_decode import _events, _rows

from gpudoctor.collectors import trace_decode, trace_share
from gpudoctor.collectors.trace_decode import _ARRAYS, _LISTS, decode_rest, read_trace
from gpudoctor.replay.window import latest_stretch

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="no memory files here (Linux only)")


def _half(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[dict]) -> trace_decode.TraceIndex:
    monkeypatch.setattr(trace_decode, "CHUNK_BYTES", 257)  # many parts per column
    monkeypatch.setattr(trace_decode, "SPLIT_MIN_BYTES", 0)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "host_name": "node-7"}))
    half = decode_rest(path)
    assert half is not None
    return half


def _handed_over(half: trace_decode.TraceIndex) -> trace_decode.TraceIndex:
    """`half` as another process reads it: exported, pickled through the pipe, restored."""
    fd = trace_share.memory_file("test")
    assert fd is not None
    try:
        shared = trace_share.export(half, fd)
        assert shared is not None
        return trace_share.restore(pickle.loads(pickle.dumps(shared)), fd)
    finally:
        os.close(fd)


def _columns(index: trace_decode.TraceIndex) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for name, columns in index.groups().items():
        out[name] = {}
        for key in (*_ARRAYS, *_LISTS):
            value = getattr(columns, key)
            out[name][key] = (value.dtype.str, value.tolist()) if isinstance(value, np.ndarray) else list(value)
    return out


def test_a_half_from_the_memory_file_is_the_half_pickled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    half = _half(tmp_path, monkeypatch, _events(60))
    pickled = pickle.loads(pickle.dumps(half))
    shared = _handed_over(_half(tmp_path, monkeypatch, _events(60)))
    assert _rows(shared) == _rows(pickled)
    assert _columns(shared) == _columns(pickled)
    assert (shared.events, shared.malformed, shared.first, shared.last, shared.decoded, shared.meta) == \
        (pickled.events, pickled.malformed, pickled.first, pickled.last, pickled.decoded, pickled.meta)
    assert shared.ops.ts.flags.writeable  # a private map: written here, never in the other process


def test_the_part_to_replay_is_the_part_pickled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": _events(80), "host_name": "node-7"}))
    part, _, what = latest_stretch(read_trace(path), 0, budget=100)
    assert what and part.part is not None  # a part of the window, as a long trace's
    shared = _handed_over(part)
    pickled = pickle.loads(pickle.dumps(part))
    assert _rows(shared) == _rows(pickled) and _columns(shared) == _columns(pickled)
    assert (shared.part, shared.first, shared.last, shared.meta) == (pickled.part, pickled.first, pickled.last,
                                                                     pickled.meta)


def test_ids_that_are_not_plain_ints_travel_as_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _events(30)
    for e in events:
        if e.get("cat") == "cuda_runtime":
            e["args"]["correlation"] = f"c{e['args']['correlation']}"  # a string id: kept as decoded
    half = _half(tmp_path, monkeypatch, events)
    shared = _handed_over(half)
    assert isinstance(shared.api.correlation, list)
    assert _rows(shared) == _rows(pickle.loads(pickle.dumps(half)))


def test_the_halves_joined_through_the_memory_file_read_as_the_whole(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": _events(80)}))
    monkeypatch.setattr(trace_decode, "CHUNK_BYTES", 257)
    monkeypatch.setattr(trace_decode, "SPLIT_MIN_BYTES", 0)
    joined = read_trace(path, rest=lambda: _handed_over(decode_rest(path)))  # type: ignore[arg-type]
    assert _rows(joined) == _rows(read_trace(path))


def test_a_file_that_cannot_be_written_leaves_the_half_to_the_pipe(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    half = _half(tmp_path, monkeypatch, _events(10))
    read_only = os.open(tmp_path / "t.json", os.O_RDONLY)
    try:
        assert trace_share.export(half, read_only) is None
    finally:
        os.close(read_only)


def test_no_memory_file_where_the_system_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "memfd_create")
    assert trace_share.memory_file("test") is None
