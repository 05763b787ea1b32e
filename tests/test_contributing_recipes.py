"""CONTRIBUTING.md's recipes "Adding a check" and "Adding a remedy with a replay prediction",
followed once: a sample plugin check (EX301) with a remedy of its own (an environment
variable) and a replay scenario of its own, written in one module and registered through the
entry point group alone, goes through the engine, the replay, the prediction, the report's
verdict and the trial planner like a built-in, without a change to any other module."""

from __future__ import annotations

import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from helpers import make_session, make_steps

sys.path.insert(0, str(Path(__file__).resolve().parent / "replay"))
from timelines import Gpu, Host, trace

from gpudoctor.collectors.trace import trace_events
from gpudoctor.replay import SCENARIOS, replay_trace
from gpudoctor.session import ProfileSummary
from gpudoctor.trials import remedies
from gpudoctor.trials.plan import plan_trials
from gpudoctor.trials.remedies import KINDS, TryRequest, parse_try
from gpudoctor.verdict import registry
from gpudoctor.verdict.build import verdict
from gpudoctor.verdict.engine import run_checks

# the whole recipe: one module, as a plugin package would ship it
SAMPLE = '''
"""EX301 slow-collate: the loop waits for a collate function that a switch makes cheaper."""

from __future__ import annotations

from gpudoctor.analysis.prediction import predict
from gpudoctor.model import Finding, Fix, Remedy, Skip, check
from gpudoctor.replay.scenarios import Scenario, register
from gpudoctor.replay.timeline import CPU, DATA
from gpudoctor.trials.remedies import RemedyKind
from gpudoctor.trials.remedies import register as register_kind


def _half_data(timeline, plan):
    changed = 0
    for i, item in enumerate(timeline.items):
        if item.kind == CPU and item.tag == DATA and plan.cost[i] > 0:
            plan.cost[i] /= 2
            changed += 1
    return changed, "DataLoader waits halved (the fast collate path)"


HALF_DATA = register(Scenario("half_data", "if collating took half the time", _half_data))
FAST_COLLATE = register_kind(RemedyKind("fast_collate", False, True, "SAMPLE_FAST_COLLATE=1",
                                        {"env": {"SAMPLE_FAST_COLLATE": "1"}}))


@check("EX301", "slow-collate", stage=1, title="Slow collate",
       fix=Fix(FAST_COLLATE.name, sizes=True, scenarios=(HALF_DATA.name,)), data_wait=True)
def run(session):
    prediction = predict(session, HALF_DATA.name, host_side=True)
    if prediction is None:
        raise Skip("no replay of a profiled window")
    return [Finding(severity="warning", title="Collate is slow", message="The loop waits for collate.",
                    remedy=Remedy("Set SAMPLE_FAST_COLLATE=1."), prediction=prediction)]
'''


@pytest.fixture
def sample(monkeypatch, tmp_path):
    (tmp_path / "sample_recipe_check.py").write_text(textwrap.dedent(SAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    real = list(registry.entry_points(group=registry.GROUP))
    extra = [EntryPoint("EX301", "sample_recipe_check:run", registry.GROUP)]
    monkeypatch.setattr(registry, "entry_points", lambda group: [*real, *extra])
    scenarios, kinds = dict(SCENARIOS), dict(KINDS)
    yield
    SCENARIOS.clear()
    SCENARIOS.update(scenarios)
    KINDS.clear()
    KINDS.update(kinds)
    sys.modules.pop("sample_recipe_check", None)


def _starved_session():
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(10):
        host.data_wait(8000)
        host.launch(1000)
    summary = replay_trace(trace_events(trace(host)), steps=10)
    assert summary is not None
    return summary, make_session(steps=make_steps(40, 0.09, 0.08), profile=ProfileSummary(steps=10, replay=summary))


def test_a_sample_check_remedy_and_scenario_go_through_like_builtins(sample):
    checks, errors = registry.load_checks()
    assert not errors
    declared = {c.id: c for c in checks}["EX301"]
    assert declared.fix is not None and declared.fix.scenarios == ("half_data",)

    # the replay: the registered scenario is replayed after the built-ins
    summary, session = _starved_session()
    names = [s.name for s in summary.scenarios]
    assert names[0] == "data" and "half_data" in names
    half = next(s for s in summary.scenarios if s.name == "half_data")
    assert half.label == "if collating took half the time" and half.detail.startswith("DataLoader waits halved")

    # the engine and the prediction: the finding predicts from its scenario
    result = run_checks(session, checks)
    finding = next(f for f in result.findings if f.id == "EX301")
    assert finding.prediction is not None and finding.prediction.scenario == "half_data"
    assert finding.prediction.method in ("replay", "bound")
    assert finding.prediction.label == "if collating took half the time"

    # the report: a declared data-wait check leading gives the measured data wait
    line = verdict([finding], {"data_wait_share": 0.8, "measured": True})
    assert line.startswith("Input-bound: the loop waited for data 80% of each step")

    # the trials: --try applies the declared remedy with its override; --try-only names it
    plans, _ = plan_trials(session, [finding], TryRequest(auto=True))
    plan = next(p for p in plans if p.name == "fast_collate")
    assert plan.override == {"env": {"SAMPLE_FAST_COLLATE": "1"}}
    assert plan.findings == ["EX301"] and plan.predicted_gain == finding.estimated_gain
    assert plan.label == "SAMPLE_FAST_COLLATE=1"
    assert parse_try(False, "fast_collate") == TryRequest(auto=False, named={"fast_collate": None})
    named, _ = plan_trials(session, [], TryRequest(auto=False, named={"fast_collate": None}))
    assert [p.name for p in named] == ["fast_collate"]


def test_a_check_without_an_outside_remedy_says_why_from_its_declaration(sample):
    from gpudoctor.model import Finding, Fix, check

    @check("EX302", "code-only", stage=3, title="Code only", fix=Fix(untried="the change is in the code"))
    def code_only(session):
        return [Finding(severity="warning", title="Something in the code", message="m")]

    _, session = _starved_session()
    result = run_checks(session, [code_only.check])
    _, untried = plan_trials(session, result.findings, TryRequest(auto=True), [code_only.check])
    assert [(u.subject, u.why) for u in untried] == [("EX302", "the change is in the code")]


def test_registering_a_taken_name_again_is_an_error():
    with pytest.raises(ValueError, match="already registered"):
        remedies.register(remedies.RemedyKind("workers", False, True, "other", {"env": {"X": "1"}}))
    from gpudoctor.replay.scenarios import Scenario, register

    with pytest.raises(ValueError, match="already registered"):
        register(Scenario("data", "other", SCENARIOS["sync"].edit))


def test_every_builtin_prediction_names_a_scenario_its_check_declares():
    """Fix.scenarios is what the checks predict with: a check that predicts from a replay
    scenario declares it (kept true by the built-ins' own code, checked here)."""
    import re

    root = Path(registry.__file__).resolve().parents[1] / "checks"
    for check in registry.load_checks()[0]:
        if check.fix is None:
            continue
        assert all(name in SCENARIOS for name in check.fix.scenarios), check.id
        module = sys.modules[check.run.__module__]
        source = Path(module.__file__).read_text()
        named = set(re.findall(r'predict\(session, "(\w+)"', source)) & set(SCENARIOS)
        assert named <= set(check.fix.scenarios), (check.id, named)
    assert root.is_dir()
