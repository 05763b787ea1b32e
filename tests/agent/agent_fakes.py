"""What the agent's profiler and step sources need from TorchHooks, without patching torch globally."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import torch

from gpudoctor.agent.profiler import ProfilerWindow
from gpudoctor.agent.safepoints import SafePoints
from gpudoctor.agent.stats import StepTracker


class FakeHooks:
    """Real StepTracker, SafePoints and ProfilerWindow around a recording agent."""

    def __init__(self, directory, cuda=True, **config):
        self.torch = torch
        self.events: list[tuple[str, dict]] = []
        self.agent = SimpleNamespace(config=config, directory=str(directory), emit=self._emit,
                                     emit_steps=self._emit_steps,
                                     error=lambda where, exc: self.events.append(("agent_error", {"where": where,
                                                                                                "error": exc})))
        self.tls = threading.local()
        self.loader_epochs: dict[str, int] = {}
        self.compile_used = False
        self.cuda = cuda
        self.steps = StepTracker(self)
        self.safepoints = SafePoints(torch, self.agent)
        self.profiler = ProfilerWindow(self)
        self.sources = None

    def _emit(self, kind, **fields):
        self.events.append((kind, fields))

    def _emit_steps(self, steps):
        self.events.extend(("step", {**fields, "ts": ts}) for ts, fields in steps)

    def on_step(self, source, n):
        if self.sources is not None:
            self.sources.on_step(source)
        self.profiler.on_step(source, n)

    def cuda_initialized(self):
        return self.cuda

    def allocator_snapshot(self, label):
        return None

    def kind(self, kind):
        return [fields for k, fields in self.events if k == kind]

    def windows(self):
        return [fields for fields in self.kind("profile") if fields.get("path")]
