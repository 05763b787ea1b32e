"""gpudoctor.collectors.trace_columns: the numpy paths (ids that are ints) and the dict paths
(any other ids) give the same summary, on real H200 windows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpudoctor.collectors.intervals import pair_codes
from gpudoctor.collectors.trace import summarize_trace
from gpudoctor.collectors.trace_columns import _match

WINDOWS = Path(__file__).resolve().parent.parent / "fixtures" / "h200" / "windows"


def respell(data: dict[str, Any], spell: Any) -> dict[str, Any]:
    """The trace with its correlation and External ids, process and thread ids respelled."""
    events = []
    for event in data["traceEvents"]:
        event = dict(event)
        for key in ("pid", "tid"):
            if isinstance(event.get(key), int):
                event[key] = spell(event[key])
        if isinstance(event.get("args"), dict):
            args = event["args"] = dict(event["args"])
            for key in ("correlation", "External id"):
                if isinstance(args.get(key), int):
                    args[key] = spell(args[key])
        events.append(event)
    return {**data, "traceEvents": events}


@pytest.mark.parametrize("window", ["item_sync", "tiny_kernels", "starved_loader"])
@pytest.mark.parametrize("spell", [str, float], ids=["strings", "floats"])
def test_ids_of_any_type_give_the_numbers_ints_give(window, spell):
    data = json.loads(gzip.decompress((WINDOWS / f"{window}.trace.json.gz").read_bytes()))
    as_ints = summarize_trace(data)
    respelled = summarize_trace(respell(data, spell))
    assert as_ints.kernel_count > 0 and as_ints.call_sites and as_ints.top_ops
    assert respelled == as_ints  # the same threads, launches and operators, found by the dict path


def test_match_keeps_the_last_position_in_first_seen_order_either_way():
    keys, lookups = [5, None, 3, 5, 9], [9, 5, None, 4, 3]
    positions = np.arange(len(keys))
    for as_ints in (True, False):
        spelled_keys = keys if as_ints else [None if k is None else str(k) for k in keys]
        spelled_lookups = lookups if as_ints else [None if k is None else str(k) for k in lookups]
        calls, entries = _match(spelled_keys, positions, spelled_lookups)
        assert calls.tolist() == [3, 2, 4]  # id 5 (last at 3), 3, 9
        assert entries.tolist() == [2, 0, -1, -1, 1]


def test_pair_codes_number_threads_as_first_met():
    for pids, tids in (([1, 1, 2, 1], [7, 8, 7, 7]), ([1, 1, 1], [9, 3, 9]), (["a", "b"], [1, 1]),
                       ([1] * 10 + [2] * 10, [5] * 20)):
        got, threads = pair_codes(pids, tids)
        expected: dict[Any, int] = {}
        for pair in zip(pids, tids):
            expected.setdefault(pair, len(expected))
        assert threads == list(expected) and got.tolist() == [expected[p] for p in zip(pids, tids)]
