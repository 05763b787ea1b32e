"""Which remedies `--try` re-runs with, planned from Sessions recorded on an H200."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.session import Session
from gpudoctor.trials.plan import plan_trials
from gpudoctor.trials.remedies import alloc_conf_env, label, parse_try
from gpudoctor.verdict.engine import run_checks
from gpudoctor.verdict.registry import load_checks

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "h200"


def planned(name: str, only: str | None = None):
    session = Session.load(FIXTURES / f"{name}.session.json")
    checks, _ = load_checks()
    findings = run_checks(session, checks).findings
    request = parse_try(only is None, only)
    assert request is not None
    plans, untried = plan_trials(session, findings, request)
    return {p.name: p for p in plans}, {u.subject: u.why for u in untried}


def test_a_starved_loader_gets_the_worker_count_gd101_computed():
    plans, _ = planned("loader_starved_gpu")
    workers = plans["workers"]
    assert workers.override["loader"]["num_workers"] == 15
    assert workers.override["loader"]["persistent_workers"] is True
    assert workers.findings[:2] == ["GD101", "GD102"]  # one run for both; GD101's prediction is the remedy's own
    # replayed step + hand-off (worker_gain), the pin-memory thread's (pin_memory=True): 6.85x realized
    assert workers.predicted_gain == pytest.approx(6.94, abs=0.01)
    assert workers.label.startswith("num_workers=15, persistent_workers=True")
    assert "compile" not in plans  # opt-in


def test_fp32_matmuls_get_tf32_labelled_as_changing_numerics():
    plans, _ = planned("fp32_matmul")
    assert list(plans) == ["tf32"]
    assert plans["tf32"].override == {"tf32": True} and plans["tf32"].numerics_change
    assert plans["tf32"].findings == ["GD304"]


def test_fragmentation_gets_expandable_segments():
    plans, _ = planned("fragmentation")
    env = plans["expandable_segments"].override["env"]
    assert list(env.values()) == ["expandable_segments:True"]


def test_compile_is_opt_in_and_then_answers_the_launch_bound_finding():
    plans, untried = planned("tiny_kernels")
    assert plans == {}
    assert "--try-only auto,compile" in untried["GD301"]
    plans, _ = planned("tiny_kernels", "auto,compile=eager")
    assert plans["compile"].override == {"compile": {"backend": "eager", "mode": None}}
    # without a backend: inductor with CUDA graphs, the captured chains GD301's replay predicts
    plans, _ = planned("tiny_kernels", "auto,compile")
    assert plans["compile"].override == {"compile": {"backend": None, "mode": "reduce-overhead"}}
    assert plans["compile"].findings == ["GD301"] and plans["compile"].numerics_change


def test_remedies_that_need_the_code_say_why():
    plans, untried = planned("item_per_layer")
    assert plans == {}
    assert "call sites" in untried["GD302"]
    _, untried = planned("pageable_copies")
    assert "no DataLoader" in untried["GD105"]  # the copies come from the code's own tensors


def test_a_crashed_run_tries_nothing_but_memory_remedies():
    plans, untried = planned("oom")
    assert plans == {}
    assert "crashed" in untried["GD302"]
    assert "does not fit" in untried["GD402"]


def test_a_remedy_named_alone_runs_without_a_finding():
    plans, _ = planned("healthy", "tf32,cudnn_benchmark")
    assert set(plans) == {"tf32", "cudnn_benchmark"}
    assert plans["tf32"].findings == [] and plans["tf32"].predicted_gain is None


def test_convolutions_get_a_cudnn_benchmark_trial():
    plans, _ = planned("small_batch")
    assert plans["cudnn_benchmark"].override == {"cudnn_benchmark": True}


@pytest.mark.parametrize("only", ["bogus", "workers=x", "prefetch=0", ","])
def test_bad_try_only_values_are_usage_errors(only):
    with pytest.raises(GpudoctorError) as err:
        parse_try(False, only)
    assert err.value.code == 64


def test_parse_try():
    assert parse_try(False, None) is None
    request = parse_try(True, None)
    assert request is not None and request.auto and request.requested == ["auto"]
    assert request.wants("workers") and not request.wants("compile")
    request = parse_try(False, "workers=4, compile")
    assert request is not None and not request.auto
    assert request.named == {"workers": "4", "compile": None}
    assert request.requested == ["workers=4", "compile"]


def test_expandable_segments_is_merged_into_the_users_allocator_setting():
    assert alloc_conf_env({}) == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert alloc_conf_env({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:False"}) == {
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:True"}
    assert alloc_conf_env({"PYTORCH_ALLOC_CONF": "roundup_power2_divisions:4"}) == {
        "PYTORCH_ALLOC_CONF": "roundup_power2_divisions:4,expandable_segments:True"}


def test_labels_read_like_code():
    assert label({"loader": {"num_workers": 8, "pin_memory": True}}) == "num_workers=8, pin_memory=True"
    assert label({"compile": {"backend": "eager"}}) == 'torch.compile(model, backend="eager")'
