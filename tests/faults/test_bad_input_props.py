"""Property tests: whatever a Session, report or trace file holds, the loaders either
accept it or refuse it with GpudoctorError (one line, a documented exit code), and
whatever a loaded Session holds, the checks and every renderer finish.

Inputs are hostile on purpose: NaN and infinities (Python's json accepts them), huge
and negative numbers, wrong types, lone surrogates (what a non-UTF-8 path decodes
to), markup, deep nesting, truncation, random bytes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gzip
import io
import json
import math
import os
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.reports import formats
from gpudoctor.session import Session

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "h200"
FIXTURE_SESSIONS = sorted(FIXTURES.glob("*.session.json"))
DOCUMENTED = {code for code, _ in exitcodes.TABLE}
FORMATS = formats.choices()  # every registered format (gpudoctor/reports/formats.py)

# GD_FUZZ_EXAMPLES=500 GD_FUZZ_RANDOM=1 pytest tests/faults/test_bad_input_props.py: a longer, fresh search
_EXAMPLES = int(os.environ.get("GD_FUZZ_EXAMPLES", "40"))
_FIXED = os.environ.get("GD_FUZZ_RANDOM") is None  # CI: the same examples every time
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
SETTINGS = settings(max_examples=_EXAMPLES, deadline=None, derandomize=_FIXED, suppress_health_check=_HEALTH)
HEAVY = settings(max_examples=max(1, _EXAMPLES // 2), deadline=None, derandomize=_FIXED,
                 suppress_health_check=_HEALTH)  # each example renders every format of a real session

# ---- hostile values ----------------------------------------------------------------------
hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "\udcff\udcfe", "</script><script>alert(1)</script>", "{{ 7*7 }}", "%s%n", "\x00\x1b[31m",
                     "a" * 5000, "GPU-\u202e", "\n\n", "NaN"]),
)
hostile_number = st.one_of(
    st.sampled_from([0, -1, 1, 2**63, -(2**63), 10**30, 0.0, -0.0, 1e308, -1e308, 1e-320,
                     math.nan, math.inf, -math.inf]),
    st.integers(-10**6, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalar = st.one_of(st.none(), st.booleans(), hostile_number, hostile_text)
hostile_json = st.recursive(scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)), max_leaves=12)


def for_type(tp: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of the JSON shape the Session field expects, with hostile contents
    (and now and then a value of the wrong type)."""
    origin = get_origin(tp)
    if dataclasses.is_dataclass(tp) and origin is None:
        hints = get_type_hints(tp)
        fields = {f.name: for_type(hints[f.name], depth + 1) for f in dataclasses.fields(tp)}
        return st.fixed_dictionaries({}, optional=fields)
    args = get_args(tp)
    if origin is list:
        return st.lists(for_type(args[0], depth + 1), max_size=3 if depth < 3 else 1)
    if origin is dict:
        return st.dictionaries(hostile_text, for_type(args[1], depth + 1), max_size=3)
    if origin is not None:  # Optional / union
        return st.one_of(*(st.none() if a is type(None) else for_type(a, depth) for a in args))
    if tp is float:
        return st.one_of(hostile_number.filter(lambda v: not isinstance(v, bool)))
    if tp is int:
        return st.one_of(st.integers(-(2**40), 2**40), st.sampled_from([0, -1, 2**63]))
    if tp is bool:
        return st.booleans()
    if tp is str:
        return hostile_text
    return hostile_json


session_dicts = for_type(Session).map(lambda d: {**d, "schema": "gpudoctor.session/1"})


@st.composite
def mutated_fixture(draw: Any) -> dict[str, Any]:
    """A real session recorded on an H200, with a few of its values replaced."""
    data = json.loads(draw(st.sampled_from(FIXTURE_SESSIONS)).read_text())
    for _ in range(draw(st.integers(1, 4))):
        node: Any = data
        path: list[Any] = []
        while isinstance(node, (dict, list)) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node)))))
            path.append(key)
            node = node[key]
        if not path:
            continue
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = draw(hostile_json)
    data["schema"] = "gpudoctor.session/1"
    return data


def judge_and_render(session: Session) -> None:
    from gpudoctor.reports import render
    from gpudoctor.verdict.judge import judge

    report = judge(session).report
    broken = [c for c in report["checks"] if c["status"] == "error"]
    assert not broken, broken  # a check that raises is a bug (and prints a traceback)
    for fmt in FORMATS:
        text = render(report, fmt)
        assert isinstance(text, str)
        text.encode("utf-8", "backslashreplace")
    json.dumps(session.to_dict(), allow_nan=False)  # what `report` saves again


def _load_from(tmp_path: Path, raw: bytes, name: str = "x.session.json") -> None:
    from gpudoctor.commands.report import load_session_or_report

    path = tmp_path / name
    path.write_bytes(raw)
    try:
        load_session_or_report(path)
    except GpudoctorError as exc:
        assert exc.code in DOCUMENTED, exc.code
        assert "\n" not in str(exc)


# ---- loaders -----------------------------------------------------------------------------
@SETTINGS
@given(raw=st.binary(max_size=300))
def test_session_loader_refuses_random_bytes_cleanly(tmp_path_factory: pytest.TempPathFactory, raw: bytes) -> None:
    _load_from(tmp_path_factory.mktemp("raw"), raw)


@SETTINGS
@given(value=hostile_json)
def test_session_loader_refuses_any_json_cleanly(tmp_path_factory: pytest.TempPathFactory, value: Any) -> None:
    raw = json.dumps(value).encode()
    _load_from(tmp_path_factory.mktemp("json"), raw)
    _load_from(tmp_path_factory.mktemp("json"), json.dumps({"schema": "gpudoctor.report/1", "files": value}).encode(),
               name="x.json")


@SETTINGS
@given(data=st.data())
def test_truncated_sessions_are_refused_cleanly(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    raw = data.draw(st.sampled_from(FIXTURE_SESSIONS)).read_bytes()
    cut = data.draw(st.integers(0, len(raw) - 1))
    _load_from(tmp_path_factory.mktemp("cut"), raw[:cut])


@SETTINGS
@given(raw=st.one_of(st.binary(max_size=200), hostile_json.map(lambda v: json.dumps(v).encode())),
       compress=st.booleans())
def test_trace_loader_refuses_junk_cleanly(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes, compress: bool
) -> None:
    from gpudoctor.commands.analyze import session_from_trace

    path = tmp_path_factory.mktemp("trace") / "t.json"
    path.write_bytes(gzip.compress(raw) if compress else raw)
    try:
        session = session_from_trace(path)
    except GpudoctorError as exc:
        assert exc.code in DOCUMENTED
        return
    judge_and_render(session)


@st.composite
def hostile_trace(draw: Any) -> dict[str, Any]:
    kinds = st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cpu_op", "python_function",
                             "user_annotation", "ac2g", None])
    event = st.fixed_dictionaries({}, optional={
        "ph": st.sampled_from(["X", "B", "E", "i", "s", "f", 7]), "cat": kinds, "name": hostile_text,
        "ts": hostile_number, "dur": hostile_number, "pid": scalar, "tid": scalar,
        "args": st.one_of(st.dictionaries(st.sampled_from(["correlation", "External id", "device", "stream",
                                                           "bytes", "Python id", "Python parent id"]),
                                          scalar, max_size=4), scalar),
    })
    return {"traceEvents": draw(st.lists(event, max_size=25)),
            "deviceProperties": draw(st.one_of(st.none(), st.lists(hostile_json, max_size=2)))}


@SETTINGS
@given(trace=hostile_trace())
def test_hostile_traces_are_analysed_or_refused(tmp_path_factory: pytest.TempPathFactory, trace: dict) -> None:
    from gpudoctor.commands.analyze import session_from_trace

    path = tmp_path_factory.mktemp("trace") / "t.json"
    path.write_text(json.dumps(trace))
    try:
        session = session_from_trace(path)
    except GpudoctorError as exc:
        assert exc.code in DOCUMENTED
        return
    judge_and_render(session)


# ---- checks and renderers on whatever loads ----------------------------------------------
@SETTINGS
@given(data=session_dicts)
def test_any_loadable_session_is_judged_and_rendered(data: dict[str, Any]) -> None:
    from gpudoctor.session import SessionError

    try:
        session = Session.from_dict(copy.deepcopy(data))
    except SessionError:
        return
    judge_and_render(session)


@HEAVY
@given(data=mutated_fixture())
def test_mutated_real_sessions_are_judged_and_rendered(data: dict[str, Any]) -> None:
    from gpudoctor.session import SessionError

    try:
        session = Session.from_dict(data)
    except SessionError:
        return
    judge_and_render(session)


saved_reports = st.fixed_dictionaries(
    {"schema": st.just("gpudoctor.report/1")},
    optional={
        "command": hostile_json,
        "exit_code": scalar,
        "duration_s": scalar,
        "environment": hostile_json,
        "summary": hostile_json,
        "findings": st.lists(hostile_json, max_size=3),
        "checks": st.lists(hostile_json, max_size=3),
        "files": hostile_json,
        "evidence": hostile_json,
        "stop_reason": scalar,
        "started_at": scalar,
    },
)


def run_cli(*args: str) -> tuple[int, str, str]:
    from gpudoctor.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, err: str) -> None:
    assert code != exitcodes.INTERNAL and (code in DOCUMENTED or code == exitcodes.FAIL_ON), (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("gpudoctor: error:")]
    assert len(errors) <= 1, err


@SETTINGS
@given(report=saved_reports)
def test_saved_reports_without_their_session_render_or_are_refused(tmp_path_factory: pytest.TempPathFactory,
                                                                   report: dict[str, Any]) -> None:
    """`gpudoctor report x.json` when the session is gone renders the saved report as it is."""
    where = tmp_path_factory.mktemp("saved")
    path = where / "saved.json"
    path.write_text(json.dumps(report))
    code, _, err = run_cli("report", str(path), "--out", str(where / "out") + "/", "--format", "html",
                           "--format", "json", "--format", "markdown", "--format", "junit")
    assert_clean(code, err)
    for fmt in ("terminal", "json"):
        code, _, err = run_cli("report", str(path), "--format", fmt)
        assert_clean(code, err)


@SETTINGS
@given(before=saved_reports, after=st.one_of(saved_reports, mutated_fixture()))
def test_diff_of_hostile_files_compares_or_refuses(tmp_path_factory: pytest.TempPathFactory,
                                                   before: dict[str, Any], after: dict[str, Any]) -> None:
    where = tmp_path_factory.mktemp("diff")
    (where / "a.json").write_text(json.dumps(before))
    (where / "b.session.json").write_text(json.dumps(after))
    for fmt in ("terminal", "json", "markdown", "html"):
        code, _, err = run_cli("diff", str(where / "a.json"), str(where / "b.session.json"), "--force", "--format", fmt)
        assert_clean(code, err)
