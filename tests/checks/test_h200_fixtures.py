"""The checks and the engine on Sessions and traces recorded on a real H200.

Each fixture has one known problem (see tests/fixtures/h200/README.md); these tests
assert what the diagnosis must say about it, with the numbers measured there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor import metrics
from gpudoctor.commands.analyze import session_from_trace
from gpudoctor.engine import run_checks
from gpudoctor.report import build_report
from gpudoctor.registry import load_checks
from gpudoctor.session import Session

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "h200"


@pytest.fixture(scope="module")
def checks():
    loaded, errors = load_checks()
    assert not errors
    return loaded


def diagnose(checks, name: str):
    session = Session.load(FIXTURES / f"{name}.session.json")
    return session, run_checks(session, checks)


def ids(result) -> list[str]:
    return [f.id for f in result.findings]


def primary(result) -> list[str]:
    return [f.id for f in result.findings if f.consequence_of is None and f.severity != "info"]


def test_starved_loader_on_gpu_is_input_bound(checks):
    session, result = diagnose(checks, "starved_loader")
    top = result.findings[0]
    assert top.id == "GD102" and top.severity == "critical"
    assert top.evidence["stall_kind"].value == "cpu-bound"
    # the idle GPU is explained by the loader, not reported as a second root cause
    idle = next(f for f in result.findings if f.id == "GD201")
    assert idle.consequence_of == "GD102"
    assert metrics.gpu_metric_mean(metrics.gpu_samples_steady(session), "sm_activity") < 5


def test_tiny_kernel_loop_is_launch_bound_first(checks):
    session, result = diagnose(checks, "tiny_kernels")
    top = result.findings[0]
    assert (top.id, top.severity) == ("GD301", "critical")
    # measured: 16,450 kernels in 10 steps, median 1.0 us, launches of 8.8 us, GPU idle 97%
    assert top.evidence["kernel_count"].value > 10_000
    assert top.evidence["kernel_median"].value < top.evidence["launch_mean"].value
    assert top.evidence["gpu_idle_share"].value > 90
    assert top.estimated_gain is not None and top.estimated_gain > 5
    # duty cycle vs real SM activity: ~9% vs ~0.08%; the idle GPU is the launch-bound loop's consequence
    samples = metrics.gpu_samples_steady(session)
    util = metrics.gpu_metric_mean(samples, "util_percent")
    sm = metrics.gpu_metric_mean(samples, "sm_activity")
    assert util is not None and sm is not None and util > 5 and sm < 1
    idle = next(f for f in result.findings if f.id == "GD201")
    assert idle.consequence_of == "GD301" and "duty cycle" in idle.message


def test_item_sync_loop_names_its_call_sites(checks):
    _, result = diagnose(checks, "item_sync")
    top = result.findings[0]
    assert (top.id, top.severity) == ("GD302", "warning")
    assert top.evidence["syncs_per_step"].value > 10  # 12 .item() per step, measured 13.1
    sites = [v.value for k, v in top.evidence.items() if k.startswith("site_")]
    assert any("item_sync.py:26" in s and "Tensor.item" in s for s in sites), sites
    assert "GD304" not in ids(result)  # TF32 is on: the syncs are its only problem
    idle = next((f for f in result.findings if f.id == "GD201"), None)
    assert idle is None or idle.consequence_of == "GD302"


def test_pageable_copies_are_the_root_cause(checks):
    _, result = diagnose(checks, "pageable_copies")
    assert {"GD105", "GD303"} <= set(primary(result))
    copies = next(f for f in result.findings if f.id == "GD303")
    assert copies.severity == "critical"
    # the busy main thread (staging pageable copies) and idle SMs are consequences
    for consequence in ("GD103", "GD201"):
        finding = next((f for f in result.findings if f.id == consequence), None)
        if finding is not None:
            assert finding.consequence_of in ("GD105", "GD303")


def test_small_batch_raises_the_batch_before_kernel_work(checks):
    _, result = diagnose(checks, "small_batch")
    assert result.findings[0].id == "GD202"
    batch = result.findings[0]
    assert "gpudoctor sweep" in (batch.remedy.code or "")
    launch = next(f for f in result.findings if f.id == "GD301")
    assert launch.consequence_of == "GD202"


def test_oom_run_reports_the_oom_first_as_capacity_under_the_cap(checks):
    session, result = diagnose(checks, "oom")
    assert session.exit_code == 1
    top = result.findings[0]
    assert (top.id, top.severity, top.ended_run) == ("GD402", "critical", True)
    # the numbers of the failure itself (12.2 GiB allocated), not of the snapshot after unwinding (8.2 GiB)
    assert top.evidence["allocated"].value == pytest.approx(12.19, abs=0.01)
    # the process was capped at 14 GiB (set_per_process_memory_fraction): the 127 GiB free on the
    # device were out of reach, so the doubling batch, not fragmentation, ran out of memory
    assert top.evidence["allowed"].value == pytest.approx(13.98, abs=0.01)
    assert top.evidence["cause"].value == "capacity"
    retries = next((f for f in result.findings if f.id == "GD401"), None)
    assert retries is None or retries.consequence_of == "GD402"
    # the steps lasted 0.1 s after 9.5 s of start-up: the start-up's idle samples are no steady state
    idle = next(o for o in result.outcomes if o.id == "GD201")
    assert idle.status == "skipped" and "too few" in (idle.reason or "")


def test_fragmenting_allocations_retry_and_end_in_an_oom_that_fragmentation_decided(checks):
    session, result = diagnose(checks, "fragmentation")
    top = result.findings[0]
    assert (top.id, top.ended_run) == ("GD402", True)
    assert top.evidence["cause"].value == "fragmentation"  # 2.4 GiB cached unused >= the 1.0 GiB request
    assert "expandable_segments" in (top.remedy.code or "")
    frag = next(f for f in result.findings if f.id == "GD401")
    assert frag.severity == "warning" and frag.evidence["num_alloc_retries"].value >= 1
    assert frag.evidence["fragmentation"].value > 20
    assert frag.consequence_of == "GD402"


def test_fp32_matmul_loop_is_gpu_bound_on_cuda_cores(checks):
    # the CPU queued all steps in 48 ms, then the GPU worked 4 s: the steady window must
    # follow the GPU, and a spinning main thread is not "Python-bound"
    session, result = diagnose(checks, "fp32_matmul")
    samples = metrics.gpu_samples_steady(session)
    assert metrics.gpu_metric_mean(samples, "sm_activity") > 80
    assert not {"GD201", "GD103"} & set(ids(result))
    top = result.findings[0]
    # the GPU is fully used (SM activity 85%): no finding is critical, the verdict says GPU-bound and
    # names what makes the work itself cheaper
    assert (top.id, top.severity) == ("GD304", "warning")
    report = build_report(session, result, docs={})
    assert report["summary"]["verdict"].startswith("GPU-bound: the GPU is fully used (SM activity 8")
    assert "GD304" in report["summary"]["verdict"]
    assert top.evidence["tf32_enabled"].value is False
    assert top.evidence["fp32_matmul_share"].value > 90
    assert top.estimated_gain is not None and top.estimated_gain > 2


def test_healthy_bf16_training_has_no_problem(checks):
    session, result = diagnose(checks, "healthy")
    assert not [f for f in result.findings if f.severity != "info"], [(f.id, f.severity) for f in result.findings]
    samples = metrics.gpu_samples_steady(session)
    assert metrics.gpu_metric_mean(samples, "sm_activity") > 90
    assert metrics.gpu_metric_mean(samples, "tensor_activity") > 10
    gd304 = next(o for o in result.outcomes if o.id == "GD304")
    assert gd304.status == "pass"  # the profiler window ran on CUDA and saw tensor-core matmuls


@pytest.mark.parametrize(
    "trace, expected",
    [
        ("launch_bound", "GD301"),
        ("host_sync", "GD302"),
        ("copies", "GD303"),
        ("fp32_matmul", "GD304"),
    ],
)
def test_real_traces_find_their_problem(checks, trace, expected):
    session = session_from_trace(FIXTURES / "traces" / f"{trace}.json.gz")
    result = run_checks(session, checks)
    assert expected in ids(result), ids(result)


@pytest.mark.parametrize("trace", ["tf32_matmul", "bf16_matmul"])
def test_tensor_core_matmuls_pass_gd304(checks, trace):
    session = session_from_trace(FIXTURES / "traces" / f"{trace}.json.gz")
    result = run_checks(session, checks)
    assert "GD304" not in ids(result)
    outcome = next(o for o in result.outcomes if o.id == "GD304")
    assert outcome.status == "pass"
