"""The agent's event encoder: json.dumps's bytes, at the cost of one Python call an event.

The agent's thread encodes two step events for each step of a fast training loop while
the loop waits for the GIL: 16.5 us an event when each field called a Python helper that
imported the string escaper again, 3.2 us now (2-core CPU VM).
"""

from __future__ import annotations

import json
import sys

import pytest

from gpudoctor.agent import events
from gpudoctor.agent.events import EventWriter, encode

FLAT = [
    {"src": "optimizer", "n": 3, "dur": 0.0016, "wait": 0.0, "bwd": 0.000612, "k": "step", "ts": 1764861234.5678},
    {"pid": 7, "ppid": None, "python": "3.11.2", "rank": None, "k": "hello", "ts": 1.0},
    {"text": "caf\u00e9 \"quoted\" \\ tab\t nl\n \x1b[31m \U0001f600", "neg": -0.0, "big": 10**30, "k": "x"},
    {"yes": True, "no": False, "tiny": 5e-324, "huge": 1.7976931348623157e308, "zero": 0, "k": "x"},
    {"\u00e9t\u00e9": 1, "k": "x"},
]


@pytest.mark.parametrize("event", FLAT)
def test_a_flat_event_is_what_json_writes(event):
    assert encode(event) == json.dumps(event, separators=(",", ":"))
    assert encode(event) == encode(dict(event))  # the cached field names change nothing


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), [1, 2], {"a": 1}, (1,), 2**0.5j])
def test_anything_else_goes_to_json_as_a_whole(value):
    event = {"a": 1, "v": value, "k": "x"}
    assert encode(event) == json.dumps(event, separators=(",", ":"), default=str)


def test_an_event_is_one_python_call():
    """No Python helper per field: a step event's seven fields cost no call of their own."""
    encode(FLAT[0])  # the string escaper and the field names, loaded and cached
    calls = []

    def profile(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        encode(FLAT[0])
    finally:
        sys.setprofile(None)
    assert calls == ["encode"]


def test_timed_events_keep_their_own_time_after_their_kind(tmp_path):
    writer = EventWriter(str(tmp_path))
    writer.emit_timed("step", [(12.5, {"src": "backward", "n": 2, "dur": 0.5, "wait": 0.0}),
                               (13.5, {"src": "optimizer", "n": 2, "dur": 0.5, "wait": 0.0})])
    writer.close()
    [path] = tmp_path.glob("events-*.jsonl")
    assert path.read_text().splitlines() == [
        '{"src":"backward","n":2,"dur":0.5,"wait":0.0,"k":"step","ts":12.5}',
        '{"src":"optimizer","n":2,"dur":0.5,"wait":0.0,"k":"step","ts":13.5}']


def test_timed_events_past_the_buffer_bound_are_counted_as_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(events, "MAX_BUFFERED", 3)
    writer = EventWriter(str(tmp_path))
    writer._stopped = True  # no flusher thread: the buffer only fills
    writer.emit("hello", pid=1)
    writer.emit_timed("step", [(float(n), {"n": n}) for n in range(4)])
    assert len(writer._buffer) == 3 and writer.dropped == 2
