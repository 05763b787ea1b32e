"""Safe points on the main thread for runs that show no step boundary at all.

A loop with no module, no DataLoader, no optimizer and no backward (tensors shipped to
the GPU one by one, a functional inference loop) marks no step, yet the profiler
window must open and close on the thread that does the work, never on the agent's
own thread. So, only while such a window is due or open, a few calls such a loop
makes on its main thread are wrapped: ``Tensor.to``, ``.cuda``, ``.copy_``, ``.item``,
``.cpu``, ``torch.cuda.synchronize`` and (through a global forward pre-hook) module
forwards. Each wrapper calls the callback on the main thread, then the original,
unchanged. ``disarm`` puts every original back; a forked child disarms at once.

Never armed under torch.compile (the agent's compile wrapper disarms before the
compiled code first runs).
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any  # noqa: F401 (named in the type comments only)

    from torch.utils.hooks import RemovableHandle

    from . import Agent

MAIN_THREAD = threading.main_thread().ident
TENSOR_METHODS = ("to", "cuda", "copy_", "item", "cpu")
_MISSING = object()


class SafePoints:
    def __init__(self, torch: ModuleType, agent: Agent) -> None:
        self.torch = torch
        self.agent = agent
        self.callback: Callable[[], None] | None = None
        self.saved: list[tuple[object, str, object]] = []  # (owner, name, value before, or _MISSING)
        self.forward_handle: RemovableHandle | None = None
        self.busy = False  # the callback runs: calls it makes are not safe points again
        self.lock = threading.Lock()

    @property
    def armed(self) -> bool:
        return self.callback is not None

    def arm(self, callback: Callable[[], None]) -> None:
        """Wrap the calls (from any thread); `callback()` then runs at the main thread's next one."""
        with self.lock:
            if self.callback is not None:
                return
            self.callback = callback
            torch = self.torch
            for name in TENSOR_METHODS:
                self._wrap(torch.Tensor, name)
            self._wrap(torch.cuda, "synchronize")
            try:
                from torch.nn.modules import module

                self.forward_handle = module.register_module_forward_pre_hook(self._on_forward)
            except Exception as exc:  # noqa: BLE001 (no forward safepoint, and reported)
                self.agent.error("safepoint_forward", exc)

    def disarm(self) -> None:
        with self.lock:
            self.callback = None
            saved, self.saved = self.saved, []
            handle, self.forward_handle = self.forward_handle, None
        for owner, name, before in reversed(saved):
            try:
                if before is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, before)
            except Exception as exc:  # noqa: BLE001 (reported; the other attributes are still restored)
                self.agent.error("safepoint_restore", exc)
        if handle is not None:
            try:
                handle.remove()
            except Exception:  # noqa: BLE001 (the hook may already be gone)
                pass

    def _wrap(self, owner: object, name: str) -> None:
        before = owner.__dict__.get(name, _MISSING)
        original = getattr(owner, name, None)
        if original is None:
            return
        hit = self._hit

        def wrapper(*args, **kwargs):  # type: (*Any, **Any) -> Any
            hit()
            return original(*args, **kwargs)

        for attr in ("__name__", "__qualname__", "__doc__"):
            try:
                setattr(wrapper, attr, getattr(original, attr))
            except (AttributeError, TypeError):
                pass
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]  # functools' marker, set on a plain function
        setattr(owner, name, wrapper)
        self.saved.append((owner, name, before))

    def _on_forward(self, module, args):  # type: (Any, tuple[Any, ...]) -> None
        self._hit()
        return None

    def _hit(self) -> None:
        callback = self.callback
        if callback is None or self.busy or threading.get_ident() != MAIN_THREAD:
            return
        self.busy = True
        try:
            callback()
        except Exception as exc:  # noqa: BLE001 (the callback's failure is reported, never raised)
            self.agent.error("safepoint", exc)
        finally:
            self.busy = False
