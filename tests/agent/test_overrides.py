"""The agent applies `--try` overrides from its config, inside the workload, and only then.

Each test runs tests/workloads/overrides_probe.py with the agent injected the way the
supervisor does it (PYTHONPATH + GPUDOCTOR_SESSION_DIR + GPUDOCTOR_AGENT_CONFIG) and
reads what the workload itself saw (its PROBE line) and the agent's "override" events.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.run.supervisor import SITE_DIR

PROBE = Path(__file__).resolve().parent.parent / "workloads" / "overrides_probe.py"
DEFAULTS = {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "prefetch_factor": None,
            "allow_tf32": False, "float32_matmul_precision": "highest", "cudnn_benchmark": False,
            "alloc_conf": None, "model_compiled": False, "transform_compiled": False, "graphs_compiled": 0}


def probe(tmp_path: Path, overrides: dict[str, Any] | None, env: dict[str, str] | None = None
          ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    session = tmp_path / "session"
    session.mkdir()
    config: dict[str, Any] = {"profile": False}
    if overrides is not None:
        config["overrides"] = overrides
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    full_env.update(PYTHONPATH=str(SITE_DIR), GPUDOCTOR_SESSION_DIR=str(session),
                    GPUDOCTOR_AGENT_CONFIG=json.dumps(config), **(env or {}))
    proc = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, env=full_env, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1].removeprefix("PROBE "))
    events = [json.loads(line) for f in session.glob("events-*.jsonl") for line in f.read_text().splitlines()]
    return seen, [e for e in events if e.get("k") == "override"]


@pytest.mark.integration
def test_no_overrides_in_the_config_changes_nothing(tmp_path):
    seen, events = probe(tmp_path, None)
    assert seen == DEFAULTS
    assert events == []


@pytest.mark.integration
def test_loader_overrides_reach_the_dataloader_the_workload_built(tmp_path):
    seen, events = probe(tmp_path, {"loader": {"num_workers": 2, "pin_memory": True, "persistent_workers": True,
                                               "prefetch_factor": 3}})
    assert seen == {**DEFAULTS, "num_workers": 2, "pin_memory": True, "persistent_workers": True,
                    "prefetch_factor": 3}
    applied = {e["name"]: (e["was"], e["value"]) for e in events}
    assert applied == {"num_workers": (0, 2), "pin_memory": (False, True), "persistent_workers": (False, True),
                       "prefetch_factor": (None, 3)}
    assert all(e["where"] == "DataLoader(torch.utils.data.dataset.TensorDataset)" for e in events)


@pytest.mark.integration
def test_a_loader_of_another_dataset_class_is_left_alone(tmp_path):
    seen, events = probe(tmp_path, {"loader": {"num_workers": 2, "dataset_class": "mymod.Other"}})
    assert seen["num_workers"] == 0
    assert events == []


@pytest.mark.integration
def test_tf32_and_cudnn_benchmark_hold_against_the_workload_turning_them_off(tmp_path):
    seen, events = probe(tmp_path, {"tf32": True, "cudnn_benchmark": True})
    assert seen == {**DEFAULTS, "allow_tf32": True, "float32_matmul_precision": "high", "cudnn_benchmark": True}
    notes = [e["note"] for e in events if e["where"] == "held"]
    assert "the workload set allow_tf32 = False; kept True" in notes
    assert "the workload set cudnn.benchmark = False; kept True" in notes


@pytest.mark.integration
def test_the_allocator_setting_is_seen_in_the_workloads_environment(tmp_path):
    wanted = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"}
    seen, events = probe(tmp_path, {"env": wanted}, env=wanted)
    assert seen == {**DEFAULTS, "alloc_conf": wanted["PYTORCH_CUDA_ALLOC_CONF"]}
    assert events[0]["name"] == "env" and events[0]["applied"] is True


@pytest.mark.integration
def test_compile_wraps_the_outermost_module_with_parameters(tmp_path):
    seen, events = probe(tmp_path, {"compile": {"backend": "eager"}})
    # the Identity "transform" ran first: passed over; the Sequential's forward really compiled
    assert seen == {**DEFAULTS, "model_compiled": True, "graphs_compiled": seen["graphs_compiled"]}
    assert seen["graphs_compiled"] >= 1
    assert [(e["name"], e["value"], e["where"]) for e in events] == [
        ("compile", "eager", "torch.nn.modules.container.Sequential"),
        ("compile_outcome", seen["graphs_compiled"], "torch._dynamo")]
    assert events[0]["note"] == "torch.compile(module.forward)"  # torch's own container
    assert events[1]["applied"] is True


class _Agent:
    def __init__(self):
        self.events = []

    def emit(self, kind, **fields):
        self.events.append(fields)


def _arguments(dataset, **given):
    import torch

    from gpudoctor.agent.overrides import Overrides

    agent = _Agent()
    arguments = {"dataset": dataset, **given}
    wanted = {"num_workers": 4, "persistent_workers": True, "prefetch_factor": 4}
    Overrides(agent, torch, {})._loader_arguments(arguments, wanted, torch.utils.data.IterableDataset)
    return arguments, agent.events


def test_an_iterable_dataset_keeps_its_worker_count():
    import torch

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    arguments, events = _arguments(Stream())
    assert "num_workers" not in arguments and "persistent_workers" not in arguments
    assert [(e["name"], e["applied"]) for e in events] == [
        ("num_workers", False), ("persistent_workers", False), ("prefetch_factor", False)]
    assert "IterableDataset" in events[0]["note"]


def test_lowering_workers_to_zero_drops_what_dataloader_refuses_without_them():
    import torch

    from gpudoctor.agent.overrides import Overrides

    arguments = {"dataset": list(range(8)), "num_workers": 8, "persistent_workers": True, "prefetch_factor": 6}
    Overrides(_Agent(), torch, {})._loader_arguments(arguments, {"num_workers": 0}, torch.utils.data.IterableDataset)
    assert arguments == {"dataset": list(range(8)), "num_workers": 0, "persistent_workers": False,
                         "prefetch_factor": None}
    torch.utils.data.DataLoader(**arguments)  # accepted


def test_a_module_of_the_workloads_own_is_compiled_with_module_compile(monkeypatch):
    import atexit

    import torch

    from gpudoctor.agent.overrides import Overrides

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.linear(x).relu()

    monkeypatch.setattr(atexit, "register", lambda fn: None)  # the outcome is read below, not at exit
    agent = _Agent()
    overrides = Overrides(agent, torch, {})
    net = Net()
    overrides._compile_module(net, {"backend": "eager"})
    assert net._compiled_call_impl is not None and "forward" not in vars(net)
    assert agent.events[0]["note"] == "nn.Module.compile()"
    net(torch.ones(2, 4))
    overrides.agent.writer = type("W", (), {"flush": lambda self, force=False: None})()
    overrides._compile_outcome()
    assert agent.events[-1]["name"] == "compile_outcome" and agent.events[-1]["applied"] is True
