"""Patch torch lazily: only when (and right after) the workload imports it."""

import sys

# Loaded at start-up: annotations name builtins or are strings (agent/__init__.py says why).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    from . import Agent


class _TorchFinder:
    """A meta path finder that wraps torch's loader to run our patches after import."""

    def __init__(self, agent: "Agent") -> None:
        self.agent = agent
        self.done = False

    def find_spec(self, fullname: str, path: "Sequence[str] | None" = None,
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname != "torch" or self.done:
            return None
        self.done = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None and spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, self.agent)  # type: ignore[assignment]  # a duck-typed Loader
                    return spec
        except Exception as exc:  # noqa: BLE001 (a finder's failure never breaks the workload's import)
            self.agent.error("find_spec", exc)
        return None

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class _PatchingLoader:
    def __init__(self, loader: "Loader", agent: "Agent") -> None:
        self._loader = loader
        self._agent = agent

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        return self._loader.create_module(spec)

    def exec_module(self, module: "ModuleType") -> None:
        self._loader.exec_module(module)  # the workload's import, unchanged
        try:
            from . import describe_process
            from .torch_hooks import TorchHooks

            describe_process(self._agent)
            hooks = TorchHooks(self._agent, module)
            hooks.install()
            self._agent.torch_hooks = hooks
        except Exception as exc:  # noqa: BLE001 (torch without gpudoctor's hooks, never a failed import)
            self._agent.error("torch_hooks", exc)
        _apply_overrides(self._agent, module)

    def __getattr__(self, name: str) -> object:
        return getattr(self._loader, name)


def install_import_hook(agent: "Agent") -> None:
    if "torch" in sys.modules:  # already imported (not possible from sitecustomize, but be safe)
        from .torch_hooks import TorchHooks

        hooks = TorchHooks(agent, sys.modules["torch"])
        hooks.install()
        agent.torch_hooks = hooks
        _apply_overrides(agent, sys.modules["torch"])
        return
    sys.meta_path.insert(0, _TorchFinder(agent))


def _apply_overrides(agent: "Agent", torch: "ModuleType") -> None:
    """`diagnose --try` runs only: the remedies named in the agent config (overrides.py)."""
    if not agent.config.get("overrides"):
        return  # a plain run: nothing is changed, nothing more is imported
    try:
        from .overrides import apply

        apply(agent, torch)
    except Exception as exc:  # noqa: BLE001 (overrides not applied, and reported)
        agent.error("overrides", exc)
