"""`gpudoctor analyze TRACE`: the JSON report from a trace, the files it writes, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.base import exitcodes
from gpudoctor.cli import main
from gpudoctor.collectors import trace_file
from gpudoctor.commands.analyze import session_from_trace


def launch_bound_trace(steps: int = 4, kernels_per_step: int = 100) -> dict[str, Any]:
    """A synthetic kineto trace: per step, tiny 2 us kernels each launched 10 us after the last
    one ended (the host is the bottleneck), inside ProfilerStep#N ranges."""
    events: list[dict[str, Any]] = []
    t, corr = 0.0, 0
    for step in range(steps):
        start = t
        for _ in range(kernels_per_step):
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
                           "ts": t, "dur": 6.0, "args": {"correlation": corr, "External id": corr}})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": 7, "ts": t - 1,
                           "dur": 8.0, "args": {"External id": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel<add>", "pid": 0,
                           "tid": 7, "ts": t + 8.0, "dur": 2.0,
                           "args": {"device": 0, "stream": 7, "correlation": corr, "External id": corr}})
            t += 20.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 7, "tid": 7,
                       "ts": start, "dur": t - start, "args": {}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320}],
            "cuda_runtime_version": 13000, "traceEvents": events}


@pytest.fixture()
def gpu_trace(tmp_path) -> Path:
    path = tmp_path / "trace-123.json.gz"
    path.write_bytes(gzip.compress(json.dumps(launch_bound_trace()).encode()))
    return path


def analyze_json(capsys, *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["analyze", *args, "--json", "-", "--quiet"])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["checks"]}


def test_json_report_on_stdout_with_the_launch_bound_finding(gpu_trace, capsys):
    code, report, _ = analyze_json(capsys, str(gpu_trace))
    assert code == exitcodes.OK
    assert report["schema"] == "gpudoctor.report/1" and report["source"] == "analyze"
    (f,) = [f for f in report["findings"] if f["id"] == "GD301"]
    assert f["severity"] == "critical" and f["slug"] == "launch-bound"
    assert f["evidence"]["launches_per_step"]["value"] == pytest.approx(100.0)
    checks = statuses(report)
    assert checks["GD302"] == "pass" and checks["GD303"] == "pass"
    assert checks["GD304"] == "skipped"  # no matmul kernels
    reasons = {c["id"]: c["reason"] for c in report["checks"]}
    assert "profiler trace" in reasons["GD102"]  # facts a trace cannot hold are skipped, with why
    assert report["environment"]["gpus"][0]["name"] == "NVIDIA H200"
    assert report["environment"]["cuda"] == "13.0"
    profile = report["evidence"]["profile"]
    assert profile["steps"] == 4 and profile["kernel_count"] == 400


def test_steps_ignore_and_fail_on(gpu_trace, capsys):
    _, report, _ = analyze_json(capsys, str(gpu_trace), "--steps", "8")
    assert report["evidence"]["profile"]["steps"] == 8
    code, report, _ = analyze_json(capsys, str(gpu_trace), "--ignore", "gd301,GD302")
    assert code == exitcodes.OK and not [f for f in report["findings"] if f["id"] == "GD301"]
    assert statuses(report)["GD301"] == "skipped"
    code, _, _ = analyze_json(capsys, str(gpu_trace), "--fail-on", "warning")
    assert code == exitcodes.FAIL_ON


def test_json_copy_beside_the_report_set_never_over_an_existing_file(gpu_trace, tmp_path, capsys):
    out, target = tmp_path / "reports", tmp_path / "ci" / "report.json"
    args = ["analyze", str(gpu_trace), "--out", str(out / "run1"), "--json", str(target), "--quiet"]
    assert main(args) == exitcodes.OK
    assert json.loads(target.read_text())["schema"] == "gpudoctor.report/1"
    assert sorted(p.name for p in out.iterdir()) == ["run1.html", "run1.json", "run1.session.json"]
    assert not [p for p in target.parent.iterdir() if p.name != "report.json"]  # no temporary file left
    assert main(args) == exitcodes.OUTPUT_EXISTS
    assert "already exists" in capsys.readouterr().err
    assert main([*args, "--force"]) == exitcodes.OK
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["analyze", str(gpu_trace), "--out", str(blocker / "sub") + "/"]) == exitcodes.CANNOT_WRITE


def test_report_files_in_out_directory(gpu_trace, tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(["analyze", str(gpu_trace), "--out", str(out) + "/", "--format", "json"]) == exitcodes.OK
    names = sorted(p.name for p in out.iterdir())
    assert any(n.startswith("trace-123-") and n.endswith(".session.json") for n in names)
    report = json.loads(next(p for p in out.iterdir() if p.name.endswith(".json")
                             and not p.name.endswith(".session.json")).read_text())
    assert any(f["id"] == "GD301" for f in report["findings"])
    assert "GD301" in capsys.readouterr().err  # the human summary goes to stderr


def test_one_format_without_out_goes_to_stdout(gpu_trace, capsys):
    assert main(["analyze", str(gpu_trace), "--format", "markdown"]) == exitcodes.OK
    assert "GD301" in capsys.readouterr().out


def test_a_real_cpu_trace_skips_the_kernel_checks(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(16, 16)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        (x @ x).sum().item()
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    code, report, _ = analyze_json(capsys, str(path))
    assert code == exitcodes.OK
    checks = {c["id"]: c for c in report["checks"]}
    for check_id in ("GD301", "GD302", "GD303", "GD304"):
        assert checks[check_id]["status"] == "skipped"  # never a silent pass
        assert "CPU-only" in checks[check_id]["reason"]
    session = session_from_trace(path)
    assert session.source == "analyze" and session.profile is not None
    assert "CPU-only" in session.unavailable["gpu"]


@pytest.mark.parametrize("name, content, code, message", [
    ("empty.json", b"", exitcodes.BAD_DATA, "empty file"),
    ("garbage.json", b"\x00\x01 not json", exitcodes.BAD_DATA, "not valid JSON"),
    ("truncated.json", b"{\"traceEvents\": [{\"ph\": \"X\"", exitcodes.BAD_DATA, "not valid JSON"),
    ("object.json", b"{\"a\": 1}", exitcodes.BAD_DATA, "no traceEvents"),
    ("noevents.json", b"{\"traceEvents\": []}", exitcodes.BAD_DATA, "no complete"),
    ("report.json", json.dumps({"schema": "gpudoctor.report/1"}).encode(), exitcodes.BAD_DATA, "gpudoctor report"),
])
def test_bad_input_is_one_line_and_an_exit_code(tmp_path, capsys, name, content, code, message):
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["analyze", str(path)]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.startswith("gpudoctor: error: ") and len(err.strip().splitlines()) == 1


def test_missing_directory_truncated_gzip_and_huge(tmp_path, capsys, monkeypatch):
    assert main(["analyze", str(tmp_path / "nope.json")]) == exitcodes.NOT_FOUND
    assert "no such file" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path)]) == exitcodes.NOT_FOUND
    assert "is a directory" in capsys.readouterr().err
    whole = gzip.compress(json.dumps(launch_bound_trace()).encode())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 3])
    assert main(["analyze", str(cut)]) == exitcodes.BAD_DATA
    assert "truncated gzip" in capsys.readouterr().err
    monkeypatch.setattr(trace_file, "MAX_TRACE_BYTES", 1000)
    big = tmp_path / "big.json"
    big.write_text(json.dumps(launch_bound_trace()))
    assert main(["analyze", str(big)]) == exitcodes.BAD_DATA
    err = capsys.readouterr().err
    assert "larger than" in err and "Traceback" not in err


def test_negative_steps_is_a_usage_error(gpu_trace, capsys):
    assert main(["analyze", str(gpu_trace), "--steps", "-1"]) == exitcodes.USAGE


def test_a_gzip_trace_is_long_by_what_it_holds(tmp_path, monkeypatch) -> None:
    """A compressed trace gets the helper process by its uncompressed size (gzip's trailer)."""
    from gpudoctor.commands import analyze as analyze_command

    monkeypatch.setattr(analyze_command, "LONG_TRACE_BYTES", 10_000)
    text = b'{"traceEvents": [' + b",".join([b'{"ph": "X", "name": "k", "ts": 1, "dur": 1}'] * 400) + b"]}"
    packed, short = tmp_path / "t.json.gz", tmp_path / "s.json.gz"
    packed.write_bytes(gzip.compress(text))
    short.write_bytes(gzip.compress(text[:9_000]))
    plain = tmp_path / "t.json"
    plain.write_bytes(text)
    assert packed.stat().st_size < 10_000 < len(text)
    assert analyze_command._long_trace(packed) and analyze_command._long_trace(plain)
    assert not analyze_command._long_trace(short)
    truncated = tmp_path / "cut.json.gz"  # its last four bytes are no trailer: here they claim 4 GiB
    truncated.write_bytes(packed.read_bytes()[:-4] + b"\xff\xff\xff\xff")
    assert not analyze_command._long_trace(truncated)
    assert not analyze_command._long_trace(tmp_path)  # a directory: a process per trace instead


# issue 27 item 10: hostile field values are bad data (65), never a TypeError or a RecursionError (70)

def _with(mutate) -> dict[str, Any]:
    trace = launch_bound_trace(steps=2, kernels_per_step=10)
    for n, event in enumerate(trace["traceEvents"]):
        mutate(n, event)
    return trace


@pytest.mark.parametrize("field, value", [
    ("pid", [1, 2]), ("pid", {"a": 1}), ("tid", [7]), ("tid", {"x": [1]}), ("pid", 1.5), ("tid", True),
])
@pytest.mark.parametrize("gz", [False, True])
def test_pid_or_tid_of_a_strange_type(tmp_path, capsys, field, value, gz):
    trace = _with(lambda n, e: e.__setitem__(field, value) if n % 3 == 0 else None)
    data = json.dumps(trace).encode()
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    code = main(["analyze", str(path), "--json", "-", "--quiet"])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and code in (exitcodes.OK, exitcodes.BAD_DATA), out.err
    if code == exitcodes.BAD_DATA:
        assert len(out.err.strip().splitlines()) == 1 and field in out.err
    else:
        assert json.loads(out.out)["schema"] == "gpudoctor.report/1"


@pytest.mark.parametrize("ts", [1e300, 10**40, 1e18, -1e300])
@pytest.mark.parametrize("field", ["ts", "dur"])
def test_times_beyond_any_clock_are_malformed_events(tmp_path, capsys, ts, field):
    """Such an event is skipped like one without a time: the window is the other events'."""
    trace = launch_bound_trace(steps=2, kernels_per_step=10)
    for event in trace["traceEvents"][:30:3]:  # frames, operators, kernels and launches
        event[field] = ts
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    code = main(["analyze", str(path), "--json", "-", "--quiet"])
    out = capsys.readouterr()
    assert code == exitcodes.OK and "Traceback" not in out.err, out.err
    assert 0 <= json.loads(out.out)["duration_s"] < 1  # the other events span 0.4 ms


def test_deep_stacks_of_frames_do_not_recurse(tmp_path, capsys):
    """5,000 nested python frames on one thread: the stack names are built without recursion."""
    trace = launch_bound_trace(steps=2, kernels_per_step=10)
    depth = 5000
    trace["traceEvents"] += [{"ph": "X", "cat": "python_function", "name": f"f{n}", "pid": 7, "tid": 7,
                              "ts": -50000.0 + n, "dur": 100000.0 - 2 * n, "args": {}} for n in range(depth)]
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(trace))
    code = main(["analyze", str(path), "--json", "-", "--quiet"])
    out = capsys.readouterr()
    assert code == exitcodes.OK, out.err
