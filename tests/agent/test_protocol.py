"""The agent's event protocol: one TypedDict per kind, the same on both ends.

mypy checks each `Agent.emit` call against its kind's TypedDict and each collector handler
reads the same class; these tests keep the three lists (the protocol's, the emit overloads',
the collector's handlers) from drifting apart, and pin the bytes on the wire.
"""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path
from typing import get_args

from gpudoctor import agent
from gpudoctor.agent import protocol
from gpudoctor.collectors import events as collector
from gpudoctor.session import Session

AGENT_ONLY = {"fetch_profile_request"}  # read by the agents (fetch_profile.py), not the supervisor


def test_every_kind_has_its_typed_dict():
    assert set(protocol.EVENTS) == set(get_args(protocol.Kind))
    assert all(isinstance(cls, type) and issubclass(cls, dict) for cls in protocol.EVENTS.values())


def _emit_overloads() -> dict[str, str]:
    """kind -> the protocol class its Agent.emit overload unpacks, read from agent/__init__.py
    (the overloads exist for type checkers only)."""
    tree = ast.parse(Path(inspect.getfile(agent)).read_text())
    [cls] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Agent"]
    found: dict[str, str] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef) and node.name == "emit" and node.decorator_list:
            kind = node.args.args[1].annotation
            fields = node.args.kwarg.annotation
            assert isinstance(kind, ast.Subscript) and isinstance(fields, ast.Subscript)
            literals = kind.slice.elts if isinstance(kind.slice, ast.Tuple) else [kind.slice]
            for literal in literals:
                found[literal.value] = ast.unparse(fields.slice)
    return found


def test_agent_emit_has_one_overload_per_kind():
    expected = {kind: "protocol." + cls.__name__ for kind, cls in protocol.EVENTS.items()}
    assert _emit_overloads() == expected


def test_the_collector_reads_each_kind_as_its_typed_dict():
    assert set(collector._HANDLERS) == set(protocol.EVENTS) - AGENT_ONLY
    for kind, handler in collector._HANDLERS.items():
        assert handler.__annotations__["e"] == "protocol." + protocol.EVENTS[kind].__name__, kind


def test_the_wire_format_is_fields_then_kind_then_time(tmp_path):
    sender = agent.Agent(str(tmp_path), dict(agent.DEFAULT_CONFIG))
    sender.hello(pid=7, ppid=1, python="3.11.2", rank=None)
    sender.emit("step", src="loader", n=2, dur=0.5, wait=0.25)
    sender.emit("step", src="optimizer", n=3, dur=0.5, wait=0.0, bwd=0.125)
    sender.emit("fetch", stats={"7:0": [4, 0.5, 0.25, None]})
    sender.writer.close()
    [path] = tmp_path.glob("events-*.jsonl")
    lines = path.read_text().splitlines()
    assert lines[0].startswith('{"pid":7,"ppid":1,"python":"3.11.2","rank":null,"k":"hello","ts":')
    assert lines[1].startswith('{"src":"loader","n":2,"dur":0.5,"wait":0.25,"k":"step","ts":')
    assert lines[2].startswith('{"src":"optimizer","n":3,"dur":0.5,"wait":0.0,"bwd":0.125,"k":"step","ts":')
    assert lines[3].startswith('{"stats":{"7:0":[4,0.5,0.25,null]},"k":"fetch","ts":')
    assert [json.loads(line)["k"] for line in lines] == ["hello", "step", "step", "fetch"]

    reader = collector.EventReader(tmp_path, 0.0)
    session = Session()
    reader.apply(session)
    assert session.steps is not None and session.steps.source == "optimizer"
    assert [r.backward_s for r in session.steps.records] == [0.125]
