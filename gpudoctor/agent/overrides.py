"""Remedies applied from outside the code, for `gpudoctor diagnose --try` runs only.

The supervisor asks for them in the agent config (GPUDOCTOR_AGENT_CONFIG, key
"overrides"; see docs/try.md); a plain run has no such key and nothing here runs.
Applied when the workload imports torch, each once, each recorded as an "override"
event (what the workload had, what it got) so the report lists what was applied:

    {"loader": {"num_workers": 8, "persistent_workers": true, "prefetch_factor": 4,
                "pin_memory": true, "dataset_class": "mod.Items"},   # DataLoader arguments
     "tf32": true,                 # set_float32_matmul_precision("high"), held
     "cudnn_benchmark": true,      # torch.backends.cudnn.benchmark = True, held
     "compile": {"backend": null, "mode": null},  # the outermost module, see below
     "env": {"PYTORCH_CUDA_ALLOC_CONF": "..."}}   # set by the supervisor; recorded here

"Held": the override answers "what if this were on", so a workload that turns it
off again (``allow_tf32 = False``, say) keeps it on, and the report says so.

An override that cannot apply (an IterableDataset, whose workers would each yield
the whole dataset unless it shards itself) is recorded as not applied, with why.
Like the rest of the agent: standard library only, and nothing raises into the workload.
"""

from __future__ import annotations

import threading
from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

    from torch.nn import Module

    from . import Agent
    from .protocol import OverrideValue

MAX_EVENTS = 40  # one loader built per epoch must not flood the event file


class Overrides:
    def __init__(self, agent: Agent, torch: ModuleType, spec: dict[str, Any]) -> None:
        self.agent = agent
        self.torch = torch
        self.spec = spec
        self.events = 0
        self.held: set[str] = set()

    def record(self, name: str, value: OverrideValue, was: OverrideValue = None, where: str | None = None,
               applied: bool = True, note: str | None = None) -> None:
        if self.events >= MAX_EVENTS:
            return
        self.events += 1
        self.agent.emit("override", name=name, value=value, was=was, where=where, applied=applied, note=note)

    def install(self) -> None:
        spec = self.spec
        for key, fn in (("env", self._env), ("loader", self._loader), ("tf32", self._tf32),
                        ("cudnn_benchmark", self._cudnn_benchmark), ("compile", self._compile)):
            if spec.get(key):
                try:
                    fn(spec[key])
                except Exception as exc:  # noqa: BLE001 (reported as not applied)
                    self.agent.error("override_" + key, exc)
                    self.record(key, None, applied=False, note="%s: %s" % (type(exc).__name__, exc))

    # -- environment (set by the supervisor, verified here) ----------------------
    def _env(self, wanted: dict[str, str]) -> None:
        import os

        for name, value in wanted.items():
            seen = os.environ.get(name)
            self.record("env", "%s=%s" % (name, seen), where="environment", applied=seen == value,
                        note=None if seen == value else "expected %s=%s" % (name, value))

    # -- DataLoader arguments -----------------------------------------------------
    def _loader(self, wanted: dict[str, Any]) -> None:
        import inspect

        from torch.utils.data import DataLoader, IterableDataset

        overrides = self
        original = DataLoader.__init__
        signature = inspect.signature(original)

        def __init__(self_loader, *args, **kwargs):  # type: (Any, *Any, **Any) -> None
            try:
                bound = signature.bind(self_loader, *args, **kwargs)
            except TypeError:
                return original(self_loader, *args, **kwargs)  # the workload's own error, as before
            try:
                overrides._loader_arguments(bound.arguments, wanted, IterableDataset)
            except Exception as exc:  # noqa: BLE001 (the loader gets the workload's own arguments)
                overrides.agent.error("override_loader_args", exc)
            return original(*bound.args, **bound.kwargs)

        __init__.__wrapped__ = original  # type: ignore[attr-defined]  # functools' marker, set on a plain function
        __init__.__name__ = original.__name__
        __init__.__qualname__ = original.__qualname__
        __init__.__doc__ = original.__doc__
        DataLoader.__init__ = __init__  # type: ignore[method-assign,assignment]  # the override's patch of torch

    def _loader_arguments(self, arguments: dict[str, Any], wanted: dict[str, Any], iterable_type: type) -> None:
        dataset = arguments.get("dataset")
        kind = type(dataset).__module__ + "." + type(dataset).__qualname__
        target = wanted.get("dataset_class")
        if target and kind != target:
            return  # another DataLoader (a validation set, say): left as the workload made it
        where = "DataLoader(%s)" % kind
        workers = arguments.get("num_workers", 0) or 0
        if "num_workers" in wanted and wanted["num_workers"] != workers:
            if isinstance(dataset, iterable_type):
                self.record("num_workers", wanted["num_workers"], workers, where, applied=False,
                            note="an IterableDataset decides how it splits across workers; left at %d" % workers)
            else:
                arguments["num_workers"] = wanted["num_workers"]
                self.record("num_workers", wanted["num_workers"], workers, where)
                workers = wanted["num_workers"]
        if workers == 0:
            # DataLoader refuses these without workers: a run lowered to 0 drops them
            for name, off in (("persistent_workers", False), ("prefetch_factor", None)):
                if arguments.get(name) not in (None, False):
                    arguments[name] = off
        for name in ("persistent_workers", "prefetch_factor"):
            if name not in wanted:
                continue
            was = arguments.get(name, False if name == "persistent_workers" else None)
            if workers == 0:
                self.record(name, wanted[name], was, where, applied=False, note="needs num_workers > 0")
            elif wanted[name] != was:
                arguments[name] = wanted[name]
                self.record(name, wanted[name], was, where)
        if "pin_memory" in wanted:
            was = bool(arguments.get("pin_memory", False))
            if wanted["pin_memory"] != was:
                arguments["pin_memory"] = wanted["pin_memory"]
                self.record("pin_memory", wanted["pin_memory"], was, where)

    # -- TF32 -------------------------------------------------------------------------
    def _tf32(self, _wanted: object) -> None:
        torch = self.torch
        was = torch.get_float32_matmul_precision()
        # one API only: mixing the legacy flag and fp32_precision makes torch raise on read
        torch.set_float32_matmul_precision("high")
        self.record("tf32", "float32_matmul_precision=high", "float32_matmul_precision=" + str(was),
                    "torch.set_float32_matmul_precision")
        overrides = self
        set_precision = torch.set_float32_matmul_precision

        def set_float32_matmul_precision(precision):  # type: (str) -> Any
            if precision == "highest":
                overrides._held("tf32", "the workload set float32_matmul_precision('highest'); kept 'high'")
                precision = "high"
            return set_precision(precision)

        set_float32_matmul_precision.__wrapped__ = set_precision  # type: ignore[attr-defined]  # functools' marker
        set_float32_matmul_precision.__doc__ = set_precision.__doc__
        torch.set_float32_matmul_precision = set_float32_matmul_precision  # type: ignore[attr-defined]  # patching torch
        cublas = type(torch.backends.cuda.matmul)
        setter = cublas.__setattr__

        def __setattr__(self_module, name, value):  # type: (Any, str, object) -> None
            if name == "allow_tf32" and value is False:
                overrides._held("tf32", "the workload set allow_tf32 = False; kept True")
                value = True
            elif name == "fp32_precision" and value == "ieee":
                overrides._held("tf32", "the workload set fp32_precision = 'ieee'; kept 'tf32'")
                value = "tf32"
            return setter(self_module, name, value)  # type: ignore[call-arg]  # the class's unbound __setattr__

        cublas.__setattr__ = __setattr__  # type: ignore[assignment]  # the override's patch of torch's class

    def _held(self, name: str, note: str) -> None:
        if name not in self.held:
            self.held.add(name)
            self.record(name, True, where="held", note=note)

    # -- cudnn.benchmark ----------------------------------------------------------------
    def _cudnn_benchmark(self, _wanted: object) -> None:
        torch = self.torch
        cudnn = torch.backends.cudnn
        was = bool(cudnn.benchmark)
        cudnn.benchmark = True
        self.record("cudnn_benchmark", True, was, "torch.backends.cudnn.benchmark")
        module_type = type(cudnn)
        prop = module_type.__dict__.get("benchmark")
        if prop is None or not hasattr(prop, "setter"):
            return
        overrides = self
        original_setter = prop.setter

        def setter(value):  # type: (object) -> Any
            if not value:
                overrides._held("cudnn_benchmark", "the workload set cudnn.benchmark = False; kept True")
                value = True
            return original_setter(value)

        prop.setter = setter

    # -- torch.compile of the outermost module ------------------------------------------
    def _compile(self, wanted: object) -> None:
        """Compile the first module with parameters called on the main thread.

        The first such module to run is the outermost one: its submodules are called
        from inside its forward. Modules without parameters (transforms, losses) are
        passed over. nn.Module.compile() compiles in place, so the workload's own
        reference now runs compiled from the next call on; the hook then removes itself.
        """
        from torch.nn.modules import module as nn_module

        overrides = self
        options = ({k: v for k, v in wanted.items() if k in ("backend", "mode") and v}
                   if isinstance(wanted, dict) else {})
        state: dict[str, Any] = {"handle": None}  # the forward pre-hook's handle, until it fires

        def pre_hook(module, args):  # type: (Module, tuple[Any, ...]) -> None
            try:
                if threading.current_thread() is not threading.main_thread():
                    return
                if overrides.torch.utils.data.get_worker_info() is not None:
                    return  # a DataLoader worker: the model lives in the training process
                if next(module.parameters(), None) is None:
                    return
                handle = state.pop("handle", None)
                if handle is not None:
                    handle.remove()
                overrides._compile_module(module, options)
            except Exception as exc:  # noqa: BLE001 (the module runs eagerly, as written)
                overrides.agent.error("override_compile", exc)

        state["handle"] = nn_module.register_module_forward_pre_hook(pre_hook)

    def _compile_module(self, module: Module, options: dict[str, Any]) -> None:
        """nn.Module.compile() where the forward is the workload's own code; torch's own
        containers (Sequential, say) get their forward compiled instead, since dynamo does
        not trace a compiled ``_call_impl`` whose forward is torch's (it would silently run eagerly)."""
        kind = type(module)
        where = kind.__module__ + "." + kind.__qualname__
        try:
            import torch._dynamo.config as dynamo_config

            dynamo_config.suppress_errors = True  # a graph dynamo cannot compile runs eagerly, as before
        except Exception:  # noqa: BLE001 (a torch without this setting: nothing to set)
            pass
        forward = getattr(kind, "forward", None)
        torch_forward = (getattr(forward, "__module__", None) or "").startswith("torch.")
        if not torch_forward and hasattr(module, "compile"):
            module.compile(**options)
            how = "nn.Module.compile()"
        else:
            module.forward = self.torch.compile(module.forward, **options)
            how = "torch.compile(module.forward)"
        note = how + (", mode=%s" % options["mode"] if options.get("mode") else "")
        self.record("compile", options.get("backend") or "inductor", None, where, note=note)
        import atexit

        atexit.register(self._compile_outcome)  # runs before the agent's own exit handler (LIFO)

    def _compile_outcome(self) -> None:
        """What dynamo did, at exit: a compile that fell back to eager must not read as applied."""
        try:
            from torch._dynamo.utils import counters

            frames: dict[str, int] = counters.get("frames", {})
            stats: dict[str, int] = counters.get("stats", {})
            breaks = sum(counters.get("graph_break", {}).values())
            graphs = stats.get("unique_graphs", 0)
            note = "%d graph(s) compiled, %d frame(s) of %d traced, %d graph break(s)" % (
                graphs, frames.get("ok", 0), frames.get("total", 0), breaks)
            self.record("compile_outcome", graphs, where="torch._dynamo", applied=graphs > 0,
                        note=note if graphs else note + ": nothing was compiled, the model ran eagerly")
            self.agent.writer.flush(force=True)
        except Exception as exc:  # noqa: BLE001 (the outcome note is lost, not the run)
            self.agent.error("override_compile_outcome", exc)


def apply(agent: Agent, torch: ModuleType) -> Overrides | None:
    """Install the overrides named in the agent config, if any (never raises)."""
    spec = agent.config.get("overrides")
    if not spec or not isinstance(spec, dict):
        return None
    try:
        overrides = Overrides(agent, torch, spec)
        overrides.install()
        return overrides
    except Exception as exc:  # noqa: BLE001 (no overrides, and reported)
        agent.error("overrides", exc)
        return None
