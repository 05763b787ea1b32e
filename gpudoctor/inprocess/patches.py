"""Undo what the agent's torch hooks changed, so the program after a watch is the program before.

The agent (gpudoctor/agent/torch_hooks.py) was written for processes that end with the
run: it patches torch for good. In-process, a watch ends and the program goes on, so
everything the hooks touch is snapshotted before they are installed and put back
after: class and module attributes (the DataLoader iterator, the dataset fetchers,
``torch.compile``), and torch's global hook registries (optimizer step hooks, module
forward hooks added by the profiler's stepless window). An entry the hooks added is
removed; an entry they replaced gets its old value back, whatever else patched it
before us (a diagnose agent, a profiler of the user's own).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import MutableMapping
from typing import Any

log = logging.getLogger(__name__)

_MISSING = object()

# (module, attribute path inside it, attribute): what TorchHooks.install and the profiler patch
ATTRIBUTES: tuple[tuple[str, str, str], ...] = (
    ("torch.utils.data.dataloader", "_BaseDataLoaderIter", "__init__"),
    ("torch.utils.data.dataloader", "_BaseDataLoaderIter", "__next__"),
    ("torch.utils.data.dataloader", "DataLoader", "_get_iterator"),
    ("torch.utils.data._utils.fetch", "_MapDatasetFetcher", "fetch"),
    ("torch.utils.data._utils.fetch", "_IterableDatasetFetcher", "fetch"),
    ("torch", "", "compile"),
    ("torch.optim.optimizer", "Optimizer", "step"),
    ("torch.cuda", "", "synchronize"),
    ("torch", "Tensor", "item"),
)

# (module, name of a dict of hooks): entries added while watching are removed afterwards
REGISTRIES: tuple[tuple[str, str], ...] = (
    ("torch.optim.optimizer", "_global_optimizer_post_hooks"),
    ("torch.optim.optimizer", "_global_optimizer_pre_hooks"),
    ("torch.nn.modules.module", "_global_forward_pre_hooks"),
    ("torch.nn.modules.module", "_global_forward_hooks"),
    ("torch.nn.modules.module", "_global_backward_hooks"),
    ("torch.nn.modules.module", "_global_backward_pre_hooks"),
)


class TorchPatchGuard:
    """Snapshot torch's patch points now; `restore()` puts them back (idempotent, never raises)."""

    def __init__(self) -> None:
        self._attributes: list[tuple[Any, str, Any]] = []
        self._registries: list[tuple[MutableMapping[Any, Any], set[Any]]] = []
        self.restored = False
        for module_name, path, name in ATTRIBUTES:
            owner = _owner(module_name, path)
            if owner is not None:
                self._attributes.append((owner, name, vars(owner).get(name, _MISSING)))
        for module_name, name in REGISTRIES:
            registry = getattr(_module(module_name), name, None)
            if isinstance(registry, MutableMapping):
                self._registries.append((registry, set(registry.keys())))

    def restore(self) -> list[str]:
        """Put every snapshotted entry back; the names that could not be restored (logged)."""
        if self.restored:
            return []
        self.restored = True
        failed: list[str] = []
        for owner, name, before in self._attributes:
            try:
                now = vars(owner).get(name, _MISSING)
                if now is before:
                    continue
                if before is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, before)
            except Exception as exc:  # noqa: BLE001  (a read-only owner: say so, go on with the rest)
                failed.append(f"{getattr(owner, '__name__', owner)}.{name}")
                log.warning("gpudoctor: could not restore %s.%s: %s", owner, name, exc)
        for registry, keys in self._registries:
            try:
                for key in [k for k in list(registry.keys()) if k not in keys]:
                    registry.pop(key, None)
            except Exception as exc:  # noqa: BLE001 (a registry left as is is reported; cleanup goes on)
                failed.append("a torch hook registry")
                log.warning("gpudoctor: could not clean a torch hook registry: %s", exc)
        return failed


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001  (an older torch without this module: nothing to guard there)
        return None


def _owner(module_name: str, path: str) -> Any:
    owner = _module(module_name)
    for part in filter(None, path.split(".")):
        owner = getattr(owner, part, None)
    return owner
