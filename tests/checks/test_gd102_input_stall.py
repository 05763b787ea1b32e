"""GD102 input-stall on synthetic Sessions with known answers."""

from __future__ import annotations

import pytest
from helpers import make_cpu_samples, make_gpu_samples, make_loader, make_session, make_steps, run_check
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.checks.gd102_input_stall import run
from gpudoctor.model import Skip
from gpudoctor.session import StepRecord


def stalled(step_s: float = 0.100, wait_s: float = 0.040, **loader_kw) -> object:
    loader_kw.setdefault("num_workers", 2)
    loader_kw.setdefault("batches", 50)
    return make_session(steps=make_steps(50, step_s, wait_s), loaders=[make_loader(**loader_kw)], usable_cores=8)


def test_cpu_bound_stall_is_critical_with_gain_and_evidence():
    session = stalled(fetch_s_per_batch=0.300, fetch_cpu_ratio=0.95)
    outcome, findings = run_check(run.check, session)
    assert outcome.status == "finding"
    (f,) = findings
    assert f.severity == "critical"  # 40% >= 30%
    assert f.evidence["stall_kind"].value == "cpu-bound"
    assert "CPU-bound" in f.title
    assert f.estimated_gain == pytest.approx(1 / 0.6)
    ev = f.evidence
    assert ev["data_wait_share"].value == pytest.approx(40.0)
    assert ev["step_time"].value == pytest.approx(100.0) and ev["step_time"].unit == "ms"
    assert ev["data_wait_per_step"].value == pytest.approx(40.0)
    assert ev["fetch_time_per_batch"].value == pytest.approx(300.0)
    assert ev["step_time"].window == "steady steps 1-50"
    assert "40%" in f.message


def test_small_wait_is_a_warning():
    (f,) = run(stalled(wait_s=0.010, fetch_s_per_batch=0.1, fetch_cpu_ratio=0.9))
    assert f.severity == "warning"
    assert f.estimated_gain == pytest.approx(1 / 0.9)


def test_waiting_stall_is_classified_waiting():
    (f,) = run(stalled(fetch_s_per_batch=0.300, fetch_cpu_ratio=0.05))
    assert f.evidence["stall_kind"].value == "waiting"
    assert "storage" in f.title


def test_middle_ratio_is_mixed():
    (f,) = run(stalled(fetch_s_per_batch=0.300, fetch_cpu_ratio=0.5))
    assert f.evidence["stall_kind"].value == "mixed"


def test_idle_fetching_thread_but_busy_worker_processes_is_mixed():
    # the fetch thread waits (ratio 0.1) while psutil sees 4 workers using ~4 cores: decoder threads
    session = make_session(
        steps=make_steps(50, 0.1, 0.04),
        loaders=[make_loader(num_workers=4, batches=50, fetch_s_per_batch=0.3, fetch_cpu_ratio=0.1)],
        cpu_samples=make_cpu_samples(20, system_percent=60.0, workers_percent=380.0),
        usable_cores=8,
    )
    (f,) = run(session)
    assert f.evidence["stall_kind"].value == "mixed"
    assert f.evidence["workers_busy"].value == pytest.approx(95.0)


def test_unmeasured_fetch_cost_is_unknown_not_guessed():
    (f,) = run(stalled())
    assert f.evidence["stall_kind"].value == "unknown"
    assert "fetch_time_per_batch" not in f.evidence
    assert "fetch_cpu_ratio" not in f.evidence


def test_worker_cpu_alone_classifies_when_fetch_cost_is_missing():
    session = make_session(
        steps=make_steps(50, 0.1, 0.04),
        loaders=[make_loader(num_workers=4, batches=50)],
        cpu_samples=make_cpu_samples(20, system_percent=20.0, workers_percent=20.0),
        usable_cores=8,
    )
    (f,) = run(session)
    assert f.evidence["stall_kind"].value == "waiting"


def test_gpu_idle_meanwhile_is_reported_when_measured():
    session = make_session(
        steps=make_steps(50, 0.1, 0.04),
        loaders=[make_loader(num_workers=2, batches=50, fetch_s_per_batch=0.3)],
        gpu_samples=make_gpu_samples(20, util_percent=35.0),
        usable_cores=8,
    )
    (f,) = run(session)
    assert f.evidence["gpu_util"].value == pytest.approx(35.0)


def test_bursty_waits_are_named():
    # 9 steps in 10 find a batch ready; every 10th waits 400 ms: the queue runs dry in bursts
    steps = []
    for i in range(50):
        steps += make_steps(1, 0.402 if i % 10 == 9 else 0.010, 0.400 if i % 10 == 9 else 0.0,
                            start_t=steps[-1].t if steps else 0.0)
    session = make_session(steps=steps, loaders=[make_loader(num_workers=4, batches=50)])
    (f,) = run(session)
    assert f.evidence["data_wait_median"].value == pytest.approx(0.0)
    assert f.evidence["data_wait_per_step"].value == pytest.approx(40.0)  # 5 x 400 ms over 50 steps
    assert "bursts" in f.message


def test_no_finding_below_five_percent():
    assert run(stalled(wait_s=0.0045, fetch_s_per_batch=0.1)) == []
    assert len(run(stalled(wait_s=0.0055, fetch_s_per_batch=0.1))) == 1


def test_warmup_steps_are_excluded():
    steps = make_steps(5, 2.0, 1.9) + make_steps(45, 0.1, 0.001, start_t=10.0)
    session = make_session(steps=steps, warmup_steps=5, loaders=[make_loader(num_workers=2, batches=50)])
    assert run(session) == []


def test_falls_back_on_loader_totals_without_steps():
    loader = make_loader(num_workers=0, batches=100, wait_total_s=3.0, fetch_s_per_batch=0.03)
    session = make_session(loaders=[loader], duration_s=10.0)
    (f,) = run(session)
    assert f.severity == "critical"
    assert f.evidence["data_wait_share"].window == "whole run (loader totals)"
    assert "step_time" not in f.evidence  # no step records: not measured, not zero


def test_capacity_note_when_workers_could_keep_up():
    # 8 workers x 1/50 ms = 160 batches/s against 1/60 ms = 16.7 needed: the wait is elsewhere
    (f,) = run(stalled(num_workers=8, fetch_s_per_batch=0.050, fetch_cpu_ratio=0.9))
    assert "handing batches over" in f.message


def test_skips_without_loader():
    session = make_session(steps=make_steps(50, 0.1, 0.0))
    outcome, findings = run_check(run.check, session)
    assert outcome.status == "skipped" and "DataLoader" in (outcome.reason or "")
    assert findings == []
    with pytest.raises(Skip, match="no DataLoader seen"):
        run(make_session(steps=make_steps(50, 0.1, 0.0), mark_missing=False))


def test_skips_when_nothing_timed_the_wait():
    session = make_session(loaders=[make_loader(num_workers=2, batches=0)], duration_s=0.0)
    with pytest.raises(Skip):
        run(session)


@settings(max_examples=60, deadline=None)
@given(step=st.floats(0.001, 5.0), wait_fraction=st.floats(0.0, 1.0))
def test_finding_iff_share_reaches_five_percent(step: float, wait_fraction: float):
    session = stalled(step_s=step, wait_s=step * wait_fraction, fetch_s_per_batch=step)
    findings = run(session)
    assert bool(findings) == (wait_fraction >= 0.05 - 1e-9) or abs(wait_fraction - 0.05) < 1e-6
    for f in findings:
        assert f.estimated_gain is not None and f.estimated_gain >= 1.0
        assert f.evidence["stall_kind"].value in ("cpu-bound", "waiting", "mixed", "unknown")


def _bursty_steps() -> list[StepRecord]:
    """45 steps that find a batch ready and every tenth that waits 400 ms: waits in bursts."""
    records, t = [], 0.0
    for i in range(50):
        wait = 0.400 if i % 10 == 9 else 0.001
        t += 0.050 + wait
        records.append(StepRecord(t=t, duration_s=0.050 + wait, data_wait_s=wait))
    return records


def test_bursty_waits_without_workers_do_not_mention_a_prefetch_queue() -> None:
    """Issue 27, item 19: "the prefetch queue runs dry" was said of a num_workers=0 loader."""
    for workers, queue in ((0, False), (4, True)):
        loader = make_loader(num_workers=workers, batches=50, batch_size=32)
        session = make_session(steps=_bursty_steps(), loaders=[loader], usable_cores=8, torch_cuda_used=True)
        _, findings = run_check(run.check, session)
        (finding,) = findings
        assert "in bursts" in finding.message
        assert ("prefetch queue" in finding.message) is queue, finding.message
