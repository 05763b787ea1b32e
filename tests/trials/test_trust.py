"""Trials that can be trusted: the same phase, and enough steady steps to drain the prefetch queue."""

from __future__ import annotations

import pytest
from helpers import make_gpu_samples, make_loader, make_session, make_steps

from gpudoctor.session import Session, StepRecord
from gpudoctor.trials.plan import TrialPlan, plan_trials
from gpudoctor.trials.remedies import parse_try
from gpudoctor.trials.report import finding_line
from gpudoctor.trials.runner import _result
from gpudoctor.verdict.engine import run_checks
from gpudoctor.verdict.registry import load_checks

PLAN = TrialPlan("cudnn_benchmark", {"cudnn_benchmark": True}, [], None)


def _loader_run(steps: list[StepRecord], *, workers: int = 4, source: str = "optimizer") -> Session:
    return make_session(steps=steps, step_source=source, warmup_steps=1,
                        loaders=[make_loader(num_workers=workers, batches=len(steps), fetch_s_per_batch=0.4,
                                             prefetch_factor=2)])


def _autotuned(steady: int) -> list[StepRecord]:
    """15 s of autotuning in the first step, then 8 steps fed from the full queue (4 workers x 2),
    then the loader's own pace: 100 ms a step, as before the remedy."""
    first = [StepRecord(t=15.0, duration_s=15.0, data_wait_s=0.0)]
    queued = make_steps(8, 0.030, 0.0, start_t=15.0)
    paced = make_steps(steady - 8, 0.100, 0.070, start_t=queued[-1].t)
    return first + queued + paced


def test_a_long_warm_up_that_filled_the_queue_makes_a_short_trial_inconclusive():
    """The JPEG run: cudnn.benchmark changed nothing, yet 22 steady steps, 8 of them from the queue
    the autotuning let 4 workers fill, measured 1.74x-like gains. 22 < 3 x 8."""
    baseline = _loader_run(make_steps(200, 0.100, 0.070))
    trial = _loader_run(_autotuned(22))
    result = _result(PLAN, baseline, trial)
    assert result.status == "inconclusive" and result.measured_gain is None
    assert "prefetch queue" in (result.why or "") and "4 x prefetch_factor 2" in (result.why or "")
    assert "inconclusive" in finding_line(result, 1.0)


def test_enough_steps_after_the_queue_measure_the_loaders_own_pace():
    baseline = _loader_run(make_steps(200, 0.100, 0.070))
    trial = _loader_run(_autotuned(60))  # 52 steps after the queue: more than 3 x 8
    result = _result(PLAN, baseline, trial)
    assert result.status == "measured"
    assert result.measured_gain == pytest.approx(1.0, abs=0.01)  # the queued steps left out


@pytest.mark.parametrize(("steady", "status"), [(23, "inconclusive"), (24, "measured")])
def test_three_queues_of_steady_steps_are_enough(steady, status):
    """The first queue (8) drained, then two more at the loader's own pace: 24 steady steps."""
    baseline = _loader_run(make_steps(200, 0.100, 0.070))
    trial = _loader_run(_autotuned(steady))
    assert len(trial.steady_steps()) == steady
    assert _result(PLAN, baseline, trial).status == status


def test_a_trial_that_measured_another_phase_is_inconclusive():
    baseline = _loader_run(make_steps(200, 0.100, 0.070))
    trial = _loader_run(make_steps(200, 0.050, 0.0), source="loader")  # a validation loop's batches
    result = _result(PLAN, baseline, trial)
    assert result.status == "inconclusive" and "not the same phase" in (result.why or "")


def test_a_run_without_workers_has_no_queue_to_drain():
    baseline = _loader_run(make_steps(20, 0.100, 0.070), workers=0)
    trial = _loader_run(make_steps(20, 0.050, 0.020), workers=0)
    result = _result(PLAN, baseline, trial)
    assert result.status == "measured" and result.measured_gain == pytest.approx(2.0, rel=1e-3)


def test_workers_are_tried_for_an_in_process_loader_whose_data_finding_is_a_note():
    """num_workers=0 behind a GPU that was 98% busy: the data wait is a note (hidden), yet a bare
    --try runs the workers trial: batches made in the loop are host work in series with the step."""
    session = make_session(steps=make_steps(60, 0.100, 0.012),
                           loaders=[make_loader(num_workers=0, batches=60, fetch_s_per_batch=0.012)],
                           gpu_samples=make_gpu_samples(40, util_percent=98.0, interval_s=0.15),
                           usable_cores=8, torch_cuda_used=True)
    checks, _ = load_checks()
    findings = run_checks(session, checks).findings
    stall = next(f for f in findings if f.id == "GD102")
    assert stall.severity == "info"
    request = parse_try(True, None)
    assert request is not None
    plans, untried = plan_trials(session, findings, request)
    workers = next(p for p in plans if p.name == "workers")
    assert workers.override["loader"]["num_workers"] >= 1 and "GD102" in workers.findings
    assert "GD102" not in {u.subject for u in untried}
