"""GD103 cpu-saturation on synthetic Sessions with known answers."""

from __future__ import annotations

import pytest
from helpers import make_cpu_samples, make_gpu_samples, make_loader, make_session, make_steps, run_check

from gpudoctor.checks.gd103_cpu_saturation import run
from gpudoctor.model import Skip


def session_with(cpu: dict, *, wait_s: float = 0.040, gpu: dict | None = None, loader: bool = True,
                 num_workers: int = 4, cores: float = 8):
    return make_session(
        steps=make_steps(50, 0.100, wait_s),
        loaders=[make_loader(num_workers=num_workers, batches=50, fetch_s_per_batch=0.3)] if loader else [],
        cpu_samples=make_cpu_samples(20, **cpu),
        gpu_samples=make_gpu_samples(20, **gpu) if gpu else [],
        usable_cores=cores,
    )


def test_saturated_cores_while_the_loop_waits():
    session = session_with({"system_percent": 97.0, "main_thread_percent": 40.0, "tree_percent": 760.0,
                            "workers_percent": 700.0})
    outcome, findings = run_check(run.check, session)
    assert outcome.status == "finding"
    (f,) = findings
    assert f.severity == "critical"  # the loop waits 40% of each step
    assert f.evidence["saturation"].value == "cores"
    assert f.evidence["cpu_busy"].value == pytest.approx(97.0)
    assert f.evidence["workers_cpu"].value == pytest.approx(7.0)
    assert f.estimated_gain == pytest.approx(1 / 0.6)
    assert "other processes" not in f.message


def test_other_processes_eating_the_cores_are_named():
    session = session_with({"system_percent": 95.0, "tree_percent": 100.0})
    (f,) = run(session)
    assert "other processes" in f.message


def test_main_thread_pegged_while_gpu_idles():
    session = session_with({"system_percent": 20.0, "main_thread_percent": 99.0}, wait_s=0.0,
                           gpu={"util_percent": 25.0})
    (f,) = run(session)
    assert f.severity == "warning"
    assert f.evidence["saturation"].value == "main-thread"
    assert "Python" in f.title or "Python" in f.message
    assert "torch.compile" in (f.remedy.code or "")


def test_main_thread_producing_batches_with_zero_workers():
    session = session_with({"system_percent": 15.0, "main_thread_percent": 100.0}, num_workers=0)
    (f,) = run(session)
    assert f.evidence["saturation"].value == "main-thread"
    assert "num_workers=0" in f.message


def test_idle_cpus_while_the_loader_stalls_is_not_saturation():
    session = session_with({"system_percent": 12.0, "main_thread_percent": 20.0, "workers_percent": 30.0},
                           wait_s=0.060)
    assert run(session) == []


def test_busy_cpu_with_a_fed_gpu_is_fine():
    # CUDA sync spin-waits keep the main thread at 100% on a busy GPU: not a problem
    session = session_with({"system_percent": 95.0, "main_thread_percent": 100.0}, wait_s=0.001,
                           gpu={"util_percent": 97.0})
    assert run(session) == []


def test_saturation_with_nothing_to_starve_is_skipped():
    # a CPU-only loop without a DataLoader: the CPU is the compute engine, not a bottleneck
    session = make_session(cpu_samples=make_cpu_samples(20, system_percent=96.0), usable_cores=4)
    with pytest.raises(Skip, match="nothing that a busy CPU could starve"):
        run(session)


def test_skips_without_cpu_samples():
    outcome, _ = run_check(run.check, make_session(steps=make_steps(50, 0.1, 0.05)))
    assert outcome.status == "skipped" and outcome.reason and outcome.reason.startswith("cpu")
    with pytest.raises(Skip):
        run(make_session(steps=make_steps(50, 0.1, 0.05), mark_missing=False))


def test_zero_workers_pegging_one_of_two_busy_cores_is_the_main_thread_not_full_cores():
    """num_workers=0 on 2 cores: the main process makes the batches on one core (tree 1.1 cores),
    something else keeps the other busy. A worker has room: never "do not add workers"."""
    session = session_with({"system_percent": 98.0, "main_thread_percent": 99.0, "tree_percent": 110.0},
                           num_workers=0, cores=2, wait_s=0.070)
    (f,) = run(session)
    assert f.evidence["saturation"].value == "main-thread"
    assert "Do not add workers" not in f.remedy.text
    assert f.remedy.knobs.get("num_workers") in ("more", "keep")


def test_zero_workers_whose_own_threads_fill_the_cores_are_full_cores():
    session = session_with({"system_percent": 98.0, "main_thread_percent": 99.0, "tree_percent": 190.0},
                           num_workers=0, cores=2, wait_s=0.070)
    (f,) = run(session)
    assert f.evidence["saturation"].value == "cores"
    assert "Do not add workers" in f.remedy.text and f.remedy.knobs == {"num_workers": "keep"}
    assert f.remedy.without_knobs is not None and "worker" not in f.remedy.without_knobs.text
