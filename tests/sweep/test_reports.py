"""The sweep report (schema gpudoctor.sweep/1) and its renderers, from a synthetic GPU sweep."""

from __future__ import annotations

import json
from html import unescape

from gpudoctor.reports import sweep_html, sweep_terminal
from gpudoctor.sweep import records
from gpudoctor.sweep.records import GpuActivity, TrialResult, TrialSpec
from gpudoctor.sweep.report import SWEEP_SCHEMA, build_sweep_report
from gpudoctor.sweep.search import SearchPlan, run_search

from .fakes import FakeRunner

HOSTILE = "<script>alert(1)</script>.py:build"


class GpuRunner(FakeRunner):
    """The fake GPU of fakes.FakeRunner, with NVML readings that follow the load."""

    def __call__(self, batch_size: int) -> TrialResult:
        result = super().__call__(batch_size)
        if result.status == records.OK:
            busy = min(1.0, batch_size / 64)
            result.gpu = GpuActivity(
                util_percent_mean=40 + 60 * busy, sm_activity_percent=95 * busy, tensor_activity_percent=80 * busy,
                power_w_mean=120 + 560 * busy, power_w_max=130 + 565 * busy, power_limit_w=700.0,
                clock_event_reasons=["SwPowerCap"] if busy == 1 else [], samples=10,
            )
            result.device = {"type": "cuda", "name": "NVIDIA H200", "total_memory_bytes": 150 * 10**9}
            result.memory.alloc_retries = 0
        return result


def synthetic_report(mode: str = "infer", budget_s: float | None = 0.05) -> dict:
    runner = GpuRunner(fits_up_to=400, latency_s=lambda b: 0.0001 * b)  # 512 -> 51 ms
    plan = SearchPlan(max_batch=1024, latency_p50_budget_s=budget_s)
    outcome = run_search(plan, runner)
    spec = TrialSpec(target=HOSTILE, mode=mode, batch_size=1, device="cuda", dtype="bfloat16")
    return build_sweep_report(
        target=HOSTILE, spec=spec, plan=plan, outcome=outcome, headroom=0.1,
        command=["gpudoctor", "sweep", HOSTILE, "--mode", mode], duration_s=12.5,
    ).to_dict()


def test_report_contract() -> None:
    report = synthetic_report(budget_s=None)
    assert report["schema"] == SWEEP_SCHEMA
    json.dumps(report, allow_nan=False)  # plain JSON, no NaN
    sizes = [t["batch_size"] for t in report["trials"]]
    assert sizes == sorted(sizes)
    orders = sorted(t["order"] for t in report["trials"])
    assert orders == list(range(len(sizes)))
    results = report["results"]
    assert results["knee"]["batch_size"] == 64
    assert results["knee_sm_activity"]["batch_size"] == 64
    assert results["memory_edge"]["found"] and results["memory_edge"]["largest_fit"] == 392
    assert {p["verdict"] for p in results["power"]} >= {"headroom", "at_limit"}
    assert report["recommendations"]["offline"]["batch_size"] == 64
    assert report["settings"]["stability"]["rule"].startswith("After warm-up")
    first = report["trials"][0]
    assert set(first) >= {"batch_size", "status", "timing", "memory", "gpu", "device", "environment", "order"}
    assert first["gpu"]["power_fraction"] is not None and first["memory"]["peak_bytes"] is not None


def test_html_is_self_contained_escaped_and_marks_knee_and_edge() -> None:
    html = sweep_html.render(synthetic_report())
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "default-src 'none'; style-src 'unsafe-inline'; img-src data:" in unescape(html)
    assert html.count("<svg") == 4  # throughput, latency, memory, GPU activity
    assert "knee (64)" in html and "memory edge (392)" in html and "p50 budget (50 ms)" in html
    assert "max_queue_delay_microseconds" in html and "--max-num-seqs" in html
    assert "http://" not in html and "https://" not in html


def cpu_report() -> dict:
    runner = FakeRunner()
    plan = SearchPlan(batch_sizes=(1, 2, 4))
    outcome = run_search(plan, runner)
    outcome.trials[0].gpu_unavailable = "CPU run"
    spec = TrialSpec(target="m.py:build", mode="train", batch_size=1, device="cpu")
    return build_sweep_report(target="m.py:build", spec=spec, plan=plan, outcome=outcome, headroom=0.1,
                              command=["gpudoctor"], duration_s=1.0).to_dict()


def test_html_of_a_cpu_sweep_says_what_was_not_measured() -> None:
    report = cpu_report()
    html = sweep_html.render(report)
    assert "Not measured: CPU run" in html
    assert report["recommendations"]["online"]["batch_size"] is None


def test_terminal_table_and_answers() -> None:
    text = sweep_terminal.to_text(synthetic_report(), width=160)
    assert "samples/s" in text and "SM act." in text and "p50 ms" in text
    assert "knee" in text and "memory edge" in text and "latency limit" in text
    assert "Offline (total hours)" in text and "Online (latency)" in text
    assert "<script>alert(1)</script>" in text  # printed as text, never interpreted
    lines = [line for line in text.splitlines() if line.strip().startswith("512")]
    assert lines and "oom" in lines[0]


CUDA_OOM = (
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.25 GiB. GPU 0 has a total capacity of 139.81 GiB of "
    "which 1.06 GiB is free. Including non-PyTorch memory, this process has 138.74 GiB memory in use. Of the "
    "allocated memory 135.11 GiB is allocated by PyTorch, and 2.90 GiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html"
    "#environment-variables)"
)


def test_an_oom_row_says_how_much_was_asked_and_the_json_and_html_keep_the_whole_error() -> None:
    """Issue 27, item 26: the OOM row printed the whole CUDA error in its notes cell (25 wrapped lines)."""
    runner = FakeRunner(fits_up_to=400, failures={512: (records.OOM, CUDA_OOM)})
    plan = SearchPlan(max_batch=1024, bisect=False)
    spec = TrialSpec(target="m.py:build", mode="train", batch_size=1, device="cuda")
    report = build_sweep_report(target="m.py:build", spec=spec, plan=plan, outcome=run_search(plan, runner),
                                headroom=0.1, command=["gpudoctor"], duration_s=1.0).to_dict()
    text = sweep_terminal.to_text(report, width=160)
    (row,) = [line for line in text.splitlines() if line.strip().startswith("512")]
    assert row.rstrip().endswith("out of memory (2.25 GiB asked)")
    assert "expandable_segments" not in text
    assert next(t for t in report["trials"] if t["batch_size"] == 512)["message"] == CUDA_OOM
    assert "expandable_segments:True" in unescape(sweep_html.render(report))


def test_the_progress_line_of_an_oom_is_one_short_line() -> None:
    from gpudoctor.commands.sweep import progress_line

    line = progress_line(TrialResult(512, records.OOM, message=CUDA_OOM))
    assert line == "  batch    512: out of memory (2.25 GiB asked)"
