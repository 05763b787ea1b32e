"""Step boundaries in every shape: precedence, backward() calls, the outermost module forward."""

from __future__ import annotations

import json

import pytest
import torch
import torch.utils.checkpoint
from agent_fakes import FakeHooks
from torch.nn.modules import module as nn_module

from gpudoctor.agent.step_sources import LEARN_CALLS, StepSources
from gpudoctor.collectors.events import EventReader


@pytest.fixture
def hooks(tmp_path):
    made = FakeHooks(tmp_path, profile=False, profile_max_windows=0)
    made.sources = StepSources(made)
    original = torch.autograd.backward
    yield made
    torch.autograd.backward = original
    made.sources.remove()
    assert not nn_module._global_forward_pre_hooks and not nn_module._global_forward_hooks
    assert "__call__" not in torch.nn.Sequential.__dict__


def test_precedence_names_the_highest_active_source(hooks):
    steps = hooks.steps
    assert steps.active() is None
    for source in ("forward", "loader", "backward", "optimizer", "explicit"):
        steps.boundary(source)
        assert steps.active() == source
    assert steps.SOURCES == ("explicit", "optimizer", "backward", "loader", "forward")
    later = steps.last["explicit"] + 60
    assert steps.active(now=later) is None  # every source went quiet


def test_each_outermost_backward_call_is_a_step(hooks):
    hooks.sources.backward.install()
    w = torch.ones(4, requires_grad=True)
    for _ in range(3):
        (w * 2).sum().backward()
    torch.autograd.backward((w * 3).sum())
    assert hooks.steps.count["backward"] == 4
    assert w.grad is not None and float(w.grad[0]) == 9.0  # the result is unchanged


def test_backward_inside_backward_is_not_another_step(hooks):
    hooks.sources.backward.install()
    layer = torch.nn.Linear(4, 4)
    x = torch.ones(2, 4, requires_grad=True)
    out = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=True)  # recomputes with backward()
    out.sum().backward()
    assert hooks.steps.count["backward"] == 1


def test_the_outermost_forward_marks_steps_and_nested_ones_do_not(hooks):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    criterion = torch.nn.MSELoss()  # a module called at the top level too, after the model
    hooks.sources.forward.install()
    x, y = torch.ones(3, 4), torch.zeros(3, 1)
    for _ in range(10):
        criterion(model(x), y)
    assert hooks.sources.forward.root_name == "Sequential"
    assert hooks.steps.count["forward"] == 10 - LEARN_CALLS + 1  # from the call that chose the root on
    hooks.sources.remove()
    assert not nn_module._global_forward_pre_hooks
    assert "__call__" not in torch.nn.Sequential.__dict__  # the root's class as it was


def test_once_the_root_is_learnt_no_global_hook_is_left(hooks):
    """A global forward hook sends every module call down torch's hooked path (a batch-1
    forward of 37 small modules: +31% on the CPU VM): a stepless inference loop must not
    keep one for its whole run. Only the root's class carries a __call__ of ours."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    inner = torch.nn.Sequential(torch.nn.Linear(4, 4))  # the root's class, not the root
    hooks.sources.forward.install()
    x = torch.ones(2, 4)
    for _ in range(LEARN_CALLS):
        model(x)
    assert not nn_module._global_forward_pre_hooks and not nn_module._global_forward_hooks
    assert hooks.sources.forward.installed and "__call__" in torch.nn.Sequential.__dict__
    before = hooks.steps.count["forward"]
    for _ in range(5):
        model(x)
        inner(x)  # another Sequential: not a step
    assert hooks.steps.count["forward"] == before + 5
    assert torch.equal(model(x), model[1](model[0](x)))  # the forward itself unchanged


def test_a_hooked_root_pickles_as_if_nothing_were_there(hooks):
    import io
    import pickle

    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    hooks.sources.forward.install()
    for _ in range(LEARN_CALLS + 1):
        model(torch.ones(1, 4))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    assert b"gpudoctor" not in buffer.getvalue() and b"step_sources" not in pickle.dumps(model)
    hooks.sources.remove()
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert not loaded._forward_pre_hooks and torch.equal(loaded(torch.ones(1, 4)), model(torch.ones(1, 4)))


def test_a_better_source_puts_the_roots_class_back(hooks):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    hooks.sources.install()
    for _ in range(LEARN_CALLS):
        model(torch.ones(1, 4))
    assert "__call__" in torch.nn.Sequential.__dict__
    hooks.steps.boundary("optimizer")
    assert "__call__" not in torch.nn.Sequential.__dict__ and not hooks.sources.forward.installed


def test_a_better_source_removes_the_forward_hooks_and_quiet_brings_them_back(hooks, monkeypatch):
    hooks.sources.install()
    assert nn_module._global_forward_pre_hooks
    hooks.steps.boundary("optimizer")
    assert not nn_module._global_forward_pre_hooks and not nn_module._global_forward_hooks
    hooks.sources.poll()  # the optimizer is active: nothing to learn
    assert not nn_module._global_forward_pre_hooks
    monkeypatch.setattr(hooks.steps, "active", lambda now=None: None)  # every source went quiet
    hooks.sources.poll()
    assert nn_module._global_forward_pre_hooks


def test_no_forward_hooks_under_torch_compile(hooks):
    hooks.compile_used = True
    hooks.sources.install()
    hooks.sources.poll()
    assert not nn_module._global_forward_pre_hooks


def test_modules_in_a_dataloader_worker_are_not_steps(hooks, monkeypatch):
    hooks.sources.forward.install()
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    torch.nn.ReLU()(torch.ones(2))
    assert not nn_module._global_forward_pre_hooks and hooks.steps.count["forward"] == 0


def test_a_forked_child_drops_the_forward_hooks(hooks):
    hooks.sources.forward.install()
    hooks.sources.forked()
    assert not nn_module._global_forward_pre_hooks


def test_the_supervisor_ranks_sources_the_same_way(tmp_path):
    lines = [{"k": "hello", "ts": 1.0, "pid": 5}]
    for n in range(1, 8):
        lines.append({"k": "step", "ts": 1.0 + n, "src": "forward", "n": n, "dur": 0.01, "wait": 0.0})
    for n in range(1, 4):
        lines.append({"k": "step", "ts": 1.0 + n, "src": "backward", "n": n, "dur": 0.1, "wait": 0.0})
    (tmp_path / "events-5.jsonl").write_text("\n".join(json.dumps(e) for e in lines) + "\n")
    reader = EventReader(tmp_path, 0.0)
    reader.poll()
    assert reader.primary() == (5, "backward")
