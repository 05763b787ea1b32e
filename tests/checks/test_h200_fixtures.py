"""The checks and the engine on Sessions and traces recorded on a real H200.

Each fixture has one known problem (see tests/fixtures/h200/README.md); these tests
assert what the diagnosis must say about it, with the numbers measured there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudoctor import metrics
from gpudoctor.analysis.prediction import GAIN_WARNING
from gpudoctor.collectors.windows import primary_calibration_steps
from gpudoctor.commands.analyze import session_from_trace
from gpudoctor.session import Session
from gpudoctor.verdict.build import build_report
from gpudoctor.verdict.engine import run_checks
from gpudoctor.verdict.registry import load_checks

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
    # the stall and the workers that remedy it: one remedy, so one number, GD101's (it sizes the workers)
    assert {f.id for f in result.findings[:2]} == {"GD101", "GD102"}
    stall = next(f for f in result.findings if f.id == "GD102")
    workers = next(f for f in result.findings if f.id == "GD101")
    assert stall.severity == "critical" and stall.estimated_gain == workers.estimated_gain
    assert stall.evidence["stall_kind"].value == "cpu-bound"
    # the idle GPU is explained by the loader, not reported as a second root cause
    idle = next(f for f in result.findings if f.id == "GD201")
    assert idle.consequence_of in ("GD101", "GD102")
    assert metrics.gpu_metric_mean(metrics.gpu_samples_steady(session), "sm_activity") < 5


def test_tiny_kernel_loop_is_launch_bound_first(checks):
    session, result = diagnose(checks, "tiny_kernels")
    # two launch-bound causes, each with its own remedy and replayed gain: the per-parameter AdamW
    # (foreach=False: 13,000 of its 16,450 kernels) and the model's own 120 layers
    top = result.findings[0]
    assert (top.id, top.severity) == ("GD305", "critical")
    assert top.prediction is not None and top.prediction.scenario == "optimizer" and top.estimated_gain > 1.5
    # the step is its fixed costs (kernels fill 1% of the SMs): more samples per step would cost little,
    # but the batch was not seen: the model's curve is a note beside the causes, explaining none of them
    batch = next(f for f in result.findings if f.id == "GD202")
    assert (batch.severity, batch.consequence_of) == ("info", None)
    assert batch.prediction is not None and batch.prediction.method == "model" and batch.prediction.batch_curve
    assert batch.prediction.gain_at(2) == pytest.approx(2.0, rel=0.02)
    launch = next(f for f in result.findings if f.id == "GD301")
    assert launch.consequence_of is None and launch.prediction is not None
    assert launch.prediction.method == "replay" and launch.prediction.scenario == "launch"
    # measured: 16,450 kernels in 10 steps, median 1.0 us, launches of 8.8 us, GPU idle 97%
    assert launch.evidence["kernel_count"].value > 10_000
    assert launch.evidence["kernel_median"].value < launch.evidence["launch_mean"].value
    assert launch.evidence["gpu_idle_share"].value > 90
    # duty cycle vs real SM activity: ~9% vs ~0.08%; the idle GPU is a launch-bound consequence
    samples = metrics.gpu_samples_steady(session)
    util = metrics.gpu_metric_mean(samples, "util_percent")
    sm = metrics.gpu_metric_mean(samples, "sm_activity")
    assert util is not None and sm is not None and util > 5 and sm < 1
    idle = next(f for f in result.findings if f.id == "GD201")
    assert idle.consequence_of in ("GD305", "GD301") and "duty cycle" in idle.message


def test_item_sync_loop_names_its_call_sites(checks):
    _, result = diagnose(checks, "item_sync")
    # the syncs are a root cause with a replayed gain (1.09x), and they head the report. The loop's
    # Python-bound main thread (GD103) stands beside them with the replayed gain of the model's calls
    # compiled into graphs: 1.00x now that the backward of the loss (computed outside the model, which a
    # compiled model leaves eager) stays as measured, its first step's 2.3 ms MeanBackward0 dispatch with
    # it (1.06x when the graph took that away too; the replay once said 1.73-2.06x with the whole window
    # one graph; plain torch.compile realized 1.15x on this loop, 2026-12-03)
    top = next(f for f in result.findings if f.id == "GD302")
    assert (top.severity, top.consequence_of) == ("warning", None)
    assert top.prediction is not None and top.prediction.method == "replay" and top.estimated_gain >= GAIN_WARNING
    assert top.evidence["syncs_per_step"].value > 10  # 12 .item() per step, measured 13.1
    sites = [v.value for k, v in top.evidence.items() if k.startswith("site_")]
    assert any("item_sync.py:26" in s and "Tensor.item" in s for s in sites), sites
    assert "GD304" not in ids(result)  # TF32 is on: the syncs are its only problem
    assert result.findings[0].id == "GD302"  # the headline: the biggest gain, not the generic idle GPU
    busy_thread = next(f for f in result.findings if f.id == "GD103")
    assert busy_thread.severity == "info" and busy_thread.consequence_of is None
    # neither remedy takes away half of the GPU's idle time in the replay: the idle GPU stands beside them
    idle = next((f for f in result.findings if f.id == "GD201"), None)
    assert idle is None or idle.consequence_of in ("GD302", "GD103") or idle.severity != "critical"


def test_pageable_copies_are_the_root_cause(checks):
    _, result = diagnose(checks, "pageable_copies")
    assert {"GD105", "GD303"} <= set(primary(result))
    copies = next(f for f in result.findings if f.id == "GD303")
    assert copies.severity == "critical"
    # pinned copies take most of the SMs' idle time away (replayed): the idle GPU is their consequence
    idle = next(f for f in result.findings if f.id == "GD201")
    assert idle.consequence_of in ("GD105", "GD303")
    busy_thread = next((f for f in result.findings if f.id == "GD103"), None)
    assert busy_thread is None or busy_thread.severity == "info" or busy_thread.consequence_of in ("GD105", "GD303")


def test_small_batch_names_the_batch_gain_first_and_the_launch_chains_as_its_consequence(checks):
    """The verdict follows the biggest gain: batch 4 on a 141 GB GPU, a step of fixed costs; the
    model predicts samples/s at each multiple of the batch, up to where the 2 workers (0.5 ms a
    batch of 4) set the pace: 8x the batch, 6.6x the samples/s, above the launch chains' 1.74x replayed
    (each of the model's calls, forward and backward, one compiled call of about 120 us; 4.2x, held to
    3.95x by the GPU's busy share, while the whole window was one graph)."""
    _, result = diagnose(checks, "small_batch")
    batch = result.findings[0]
    assert (batch.id, batch.consequence_of) == ("GD202", None)
    assert batch.prediction is not None and batch.prediction.method == "model"
    assert batch.prediction.batch_multiple == 8 and 5 < batch.estimated_gain < 8
    assert batch.prediction.gain_at(2) == pytest.approx(2.0, rel=0.05)
    assert "DataLoader's workers" in batch.message
    assert "gpudoctor sweep" in (batch.remedy.code or "")
    launch = next(f for f in result.findings if f.id == "GD301")
    assert launch.consequence_of == "GD202" and launch.prediction is not None
    assert launch.prediction.method == "replay" and 1.3 < launch.estimated_gain < 2.5


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
    _session, result = diagnose(checks, "fragmentation")
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
    assert re.match(r"GPU-bound: the GPU is fully used \(SM activity \d+%", report["summary"]["verdict"])
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


# ---- the replay's predictions, against the same workload with the remedy applied by hand ----
# (`scripts/record_gpu_fixtures.py --remedied`: realized = steps/s with the remedy / steps/s without)
ACCURACY = 0.30  # issue 10/12's goal: every prediction within 30% of the realized gain


def realized(before: str, after: str) -> float:
    rates = []
    for name in (before, after):
        summary = metrics.step_summary(Session.load(FIXTURES / f"{name}.session.json"))
        assert summary is not None
        rates.append(summary.steps_per_s)
    return rates[1] / rates[0]


def test_gpu_bound_loop_with_an_overlapped_loader_is_not_input_bound(checks):
    # bf16 training at its power cap, fed by 2 workers about as fast as the GPU consumes: the loop
    # blocks in __next__, but queued GPU work keeps the GPU busy; 8 workers bought nothing (0.99x)
    session, result = diagnose(checks, "loader_overlap")
    report = build_report(session, result, docs={})
    assert report["summary"]["verdict"].startswith("GPU-bound: the GPU is fully used")
    assert not [f for f in result.findings if f.severity == "critical"]
    assert "GD101" not in ids(result)
    wait = next((f for f in result.findings if f.id == "GD102"), None)
    if wait is not None:  # a wait worth naming is shown as hidden
        assert wait.severity == "info" and wait.title.startswith("Data wait hidden")
        assert wait.estimated_gain is not None and wait.estimated_gain < 1.053
        assert abs(wait.estimated_gain - realized("loader_overlap", "loader_overlap+workers8")) < ACCURACY


def test_same_loader_with_the_gpu_starved_is_input_bound_and_its_gain_holds(checks):
    _session, result = diagnose(checks, "loader_starved_gpu")
    assert {f.id for f in result.findings[:2]} == {"GD101", "GD102"}
    stall = next(f for f in result.findings if f.id == "GD102")
    assert stall.severity == "critical"
    workers = next(f for f in result.findings if f.id == "GD101")
    # the workers' step is built on the replayed step without waits: a replay, not a rule
    assert workers.prediction is not None and workers.prediction.method == "replay"
    assert workers.evidence["recommended_workers"].value == 15  # 16 usable cores, one left to the loop
    gained = realized("loader_starved_gpu", "loader_starved_gpu+workers15")  # 6.85x measured
    assert workers.estimated_gain is not None
    assert abs(workers.estimated_gain - gained) / gained < ACCURACY
    # one remedy, one number: the stall shows the workers' prediction, its own (instant batches) a cross-check
    assert stall.estimated_gain == workers.estimated_gain and "cross-check" in stall.message
    idle = next(f for f in result.findings if f.id == "GD201")
    assert idle.consequence_of in ("GD101", "GD102")


def test_item_per_layer_is_sync_bound_and_its_gain_holds(checks):
    _, result = diagnose(checks, "item_per_layer")
    top = result.findings[0]
    assert (top.id, top.consequence_of) == ("GD302", None)
    assert top.prediction is not None and top.prediction.method == "replay"
    gained = realized("item_per_layer", "item_per_layer+no_item")  # 1.32x measured; 1.18x predicted
    assert abs(top.estimated_gain - gained) / gained < ACCURACY
    assert any("item_per_layer.py" in str(v.value) for k, v in top.evidence.items() if k.startswith("site_"))


def test_removing_the_syncs_keeps_the_host_work_the_remedy_still_does():
    """Issue 25: the sync what-if used to drop every host item that began inside a `.item()`, and the
    item after each sync spans the next layer's dispatch too: 902 us a step as traced, where
    `aten::item` itself took 342 us, so a host-bound loop was predicted to gain host work it keeps.
    The remedied run (+no_item: `running += h.detach().abs().mean()`) measured more host work a
    step than the base, not less. Only the waits go: every other item costs what it was measured."""
    from gpudoctor.collectors.trace import load_trace, trace_events
    from gpudoctor.replay import edits
    from gpudoctor.replay.simulate import Plan
    from gpudoctor.replay.timeline import build

    def timeline(name: str):
        built = build(trace_events(load_trace(FIXTURES / "windows" / f"{name}.trace.json.gz")))
        assert built is not None
        return built

    base = timeline("item_per_layer")
    measured = Plan.measured(base)
    edited = measured.copy()
    changed, _ = edits.sync(base, edited)
    syncs = set(edits.facts(base).syncs)
    assert changed == len(syncs) == 160
    assert [i for i, (a, b) in enumerate(zip(measured.cost, edited.cost)) if a != b and i not in syncs] == []
    assert sum(edited.cost) <= sum(Plan.measured(timeline("item_per_layer+no_item")).cost)


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".trace.json.gz")
                                        for p in (FIXTURES / "windows").glob("*.trace.json.gz")))
def test_replaying_a_recorded_window_again_gives_the_stored_prediction(name):
    """Golden: the replay stored in each fixture is what this checkout computes from its trace
    (rewrite with scripts/replay_fixture.py --write when the model changes on purpose)."""
    from gpudoctor.collectors.trace import load_trace, trace_events
    from gpudoctor.replay import replay_or_error

    session = Session.load(FIXTURES / f"{name}.session.json")
    assert session.profile is not None and session.profile.replay is not None
    stored = session.profile.replay
    again = replay_or_error(trace_events(load_trace(FIXTURES / "windows" / f"{name}.trace.json.gz")),
                            session.profile.steps, primary_calibration_steps(session),
                            source=session.profile.step_source)
    assert again is not None and again.error is None
    assert again.baseline_span_us == pytest.approx(stored.baseline_span_us, rel=1e-6)
    assert {s.name: s.span_us for s in again.scenarios} == pytest.approx(
        {s.name: s.span_us for s in stored.scenarios}, rel=1e-6)
    assert again.combined == pytest.approx(stored.combined, rel=1e-6)
    # the what-if rows of the report's timeline (scripts/picture_fixture.py --write stored them)
    assert again.baseline_picture_span_us == pytest.approx(stored.baseline_picture_span_us, rel=1e-6)
    assert {s.name: s.picture_span_us for s in again.scenarios} == pytest.approx(
        {s.name: s.picture_span_us for s in stored.scenarios}, rel=1e-6)


# ---- issue 11's shapes, recorded on the H200: every run gets its kernel-level diagnosis ----
def test_ten_second_batch1_inference_loop_gets_a_window_and_its_launch_bound_verdict(checks):
    session, result = diagnose(checks, "infer_10s")
    assert session.steps.source == "forward"  # no loader, no optimizer: the outermost module forward
    assert session.profile is not None and session.profile.kernel_count > 1000
    top = result.findings[0]
    assert (top.id, top.severity) == ("GD301", "critical") and top.prediction.method == "replay"
    # batch-1 inference whose step is launches and Python: more samples per step would cost little (the
    # model's curve), a note only: the batch was not seen
    batch = next(f for f in result.findings if f.id == "GD202")
    assert (batch.severity, batch.consequence_of) == ("info", None) and batch.prediction.method == "model"


def test_module_less_small_copies_loop_gets_a_stepless_window_and_gd303(checks):
    session, result = diagnose(checks, "small_copies")
    assert session.steps.count == 0 and session.profiles and session.profile is not None
    copies = next(f for f in result.findings if f.id == "GD303")
    assert "per second" in copies.message or "/s" in str(copies.evidence)


def test_backward_only_loop_steps_on_backward(checks):
    session, result = diagnose(checks, "backward_only")
    assert session.steps.source == "backward"
    assert result.findings[0].id == "GD301"
    assert next(f for f in result.findings if f.id == "GD202").severity == "info"  # the batch was not seen


def test_a_phase_change_gets_its_own_window_and_findings_say_which(checks):
    session, result = diagnose(checks, "phases")
    labels = [p.label for p in session.profiles]
    assert labels[0] == "start" and "phase" in labels and len(labels) >= 2
    assert any("window 3 (phase" in (f.window or "") for f in result.findings)


def test_one_rank_torchrun_job_on_nccl_is_one_rank_with_its_numbers(checks):
    # `gpudoctor diagnose -- torchrun --standalone --nproc-per-node=1 tests/workloads/gpu/ddp_ranks.py`
    session, result = diagnose(checks, "ddp_one_rank")
    assert [(r.rank, r.backend, r.world_size) for r in session.ranks] == [(0, "nccl", 1)]
    assert session.primary_rank == 0
    outcomes = {o.id: o for o in result.outcomes}
    for check_id in ("GD501", "GD503", "GD504"):
        assert outcomes[check_id].status == "skipped" and "one rank" in (outcomes[check_id].reason or "")
    report = build_report(session, result)
    (row,) = report["ranks"]["rows"]
    assert row["rank"] == 0 and row["backend"] == "nccl" and row["steps"] > 50
    assert 0 < row["step_time_s"] < 0.01 and row["gpu_busy_percent"] > 0
    # the idle GPU's bound (4.8x, "if the GPU never idled") is no remedy: the verdict names the one
    # concrete cause measured, the per-parameter optimizer (1.17x replayed)
    assert report["summary"]["verdict"].startswith("Kernel-bound: the optimizer updates parameters one at a time")
