"""Real Sessions (recorded on an H200) with their numbers and lists mutated in place, the
way a hand edit, a bad converter or a hostile file changes them: each loads and is judged
and rendered in every format without a traceback or a warning, or is refused on load with
one line (exit 65). Values keep their JSON type, so most mutants load and reach the checks.

GD_FUZZ_EXAMPLES=2000 GD_FUZZ_RANDOM=1 pytest tests/faults/test_session_fuzz.py: a longer,
fresh search.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor.base import exitcodes
from gpudoctor.session import Session, SessionError

from .test_bad_input_props import FIXTURE_SESSIONS, judge_and_render

_EXAMPLES = int(os.environ.get("GD_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=_EXAMPLES, deadline=None, derandomize=os.environ.get("GD_FUZZ_RANDOM") is None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_FIXTURES = {path: json.loads(path.read_text()) for path in FIXTURE_SESSIONS}

edge_numbers = st.one_of(
    st.sampled_from([0, 1, 2, 0.0, -0.0, 5e-324, 1e-320, 1e-9, 0.5, 0.999, 1.0, 100.0, 101.0, 1e6, 1e12, 1e15,
                     -1, -0.5, 1e16, 1e308, math.nan, math.inf, -math.inf]),
    st.floats(min_value=0, max_value=1e15, allow_nan=False),
    st.integers(0, 2**40),
)


def _leaves(node: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """Every number and list in the document, with its path."""
    found: list[tuple[tuple, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _leaves(value, (*path, key))
    elif isinstance(node, list):
        found.append((path, node))
        for i, value in enumerate(node):
            found += _leaves(value, (*path, i))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        found.append((path, node))
    return found


@st.composite
def mutated_numbers(draw: Any) -> dict[str, Any]:
    path_of_fixture = draw(st.sampled_from(FIXTURE_SESSIONS))
    data = json.loads(json.dumps(_FIXTURES[path_of_fixture]))  # a fresh copy
    leaves = _leaves(data)
    for _ in range(draw(st.integers(1, 6))):
        path, value = draw(st.sampled_from(leaves))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if not path:
            continue
        if isinstance(value, list):  # shorter, empty, or an item repeated
            size = draw(st.sampled_from([0, 1, 2, len(value) + 1]))
            parent[path[-1]] = (value * 2)[:size] if value else []
        else:
            parent[path[-1]] = draw(edge_numbers)
    if draw(st.booleans()) and isinstance(data.get("profile"), dict):  # more histogram buckets
        buckets = draw(st.sampled_from([0, 1, 60, 65, 20_000]))
        data["profile"]["kernel_duration_hist"] = {f"<{i} us": i for i in range(buckets)}
    return data


@FUZZ
@given(data=mutated_numbers())
def test_mutated_real_sessions_load_and_judge_cleanly_or_are_refused(data: dict[str, Any]) -> None:
    try:
        session = Session.from_dict(json.loads(json.dumps(data)))  # as JSON carries it (NaN included)
    except SessionError as exc:
        assert "\n" not in str(exc)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a chart or a check that warns is a defect too
        judge_and_render(session)


@pytest.mark.parametrize("field, value, words", [
    (("environment", "cpu", "usable_cores"), math.inf, "usable_cores is inf"),
    (("environment", "cpu", "usable_cores"), math.nan, "usable_cores is nan"),
    (("duration_s",), -3.0, "duration_s is negative"),
    (("steps", "records", 0, "duration_s"), -0.5, "steps.records[0].duration_s is negative"),
    (("batch_size",), 10**18, "beyond any measurement"),
])
def test_nan_infinity_and_negative_numbers_are_refused_on_load(tmp_path: Path, field: tuple, value: Any,
                                                               words: str) -> None:
    from .conftest import main

    data = json.loads(FIXTURE_SESSIONS[0].read_text())
    node = data
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    path = tmp_path / "bad.session.json"
    path.write_text(json.dumps(data))  # Python writes NaN and Infinity as JSON does not allow
    proc = main("report", str(path), "--format", "json")
    err = proc.stderr.decode()
    assert proc.returncode == exitcodes.BAD_DATA, err
    assert err.count("\n") == 1 and words in err, err


def test_a_session_of_20000_histogram_buckets_is_refused_at_once(tmp_path: Path) -> None:
    import time

    from .conftest import main

    data = json.loads(FIXTURE_SESSIONS[0].read_text())
    data["profile"] = dict(data.get("profile") or {}, kernel_duration_hist={f"<{i} us": 1 for i in range(20_000)})
    path = tmp_path / "buckets.session.json"
    path.write_text(json.dumps(data))
    started = time.process_time()
    proc = main("report", str(path), "--format", "json")
    assert proc.returncode == exitcodes.BAD_DATA and b"kernel_duration_hist has 20,000 entries" in proc.stderr
    assert time.process_time() - started < 30  # the work is bounded (it took minutes)


# ---- memory and work bounded by content ----------------------------------------------------
def _peak_rss_mib(*args: str) -> tuple[int, int, str]:
    """Run `gpudoctor ARGS` in a fresh interpreter: (exit code, its peak RSS in MiB, stderr)."""
    import subprocess
    import sys

    # VmHWM: this process's own peak (ru_maxrss would carry the forking pytest's over exec)
    code = ("import sys\nfrom gpudoctor.cli import main\ncode = main(sys.argv[1:])\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
            "print(int(hwm.split()[1]) // 1024)\nsys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          check=False)
    return proc.returncode, int(proc.stdout.strip().splitlines()[-1]), proc.stderr


MEMORY_BOUND_MIB = 300  # the interpreter, gpudoctor's imports and the bounded input (measured: 50-130)


@pytest.mark.integration
def test_a_session_of_millions_of_tiny_objects_is_refused_within_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.session.json"
    sample = b'{"t":1,"system_percent":1},'
    with open(path, "wb") as fh:  # 40 MiB: under the size limit, but 1.5 million samples
        fh.write(b'{"schema":"gpudoctor.session/1","cpu_samples":[')
        fh.write(sample * 1_500_000)
        fh.write(b'{"t":1,"system_percent":1}]}')
    code, peak, err = _peak_rss_mib("report", str(path), "--format", "json")
    assert code == exitcodes.BAD_DATA and "JSON objects" in err, err
    assert peak < MEMORY_BOUND_MIB, peak


@pytest.mark.integration
def test_a_gzip_bomb_trace_is_refused_within_bounded_memory(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "bomb.json.gz"
    event = b'{"ph":"X","ts":1,"dur":1,"name":"k","cat":"kernel"},'
    with gzip.open(path, "wb", compresslevel=1) as fh:  # a few MB on disk, 160 MiB of tiny events
        fh.write(b'{"traceEvents":[')
        block = event * 100_000
        for _ in range(32):
            fh.write(block)
        fh.write(event[:-1] + b"]}")
    assert path.stat().st_size < 8 << 20
    code, peak, err = _peak_rss_mib("analyze", str(path), "--json", "-")
    assert code == exitcodes.BAD_DATA and "JSON objects" in err, err
    assert peak < MEMORY_BOUND_MIB, peak
