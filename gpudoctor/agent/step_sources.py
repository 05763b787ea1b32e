"""Step boundaries from backward() calls and from the outermost module forward.

backward: ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped; an
outermost call that returns marks a step. Calls made while another backward runs
anywhere in the process (reentrant activation checkpointing calls backward from the
autograd engine's threads) are not steps.

forward: a module forward that starts while no other module's forward runs on its
thread. Global forward hooks (never a hook stored on the user's modules: those would
travel with ``torch.save(model)``) learn which module that is: a pre-hook and a
post-hook keep the nesting depth per thread, and the first module to start
``LEARN_CALLS`` forwards at depth 0 becomes the root. Then both global hooks go: while
any global hook is registered, every module call takes torch's hooked path, which cost
5.5 us per module call on the 2-core CPU VM (a batch-1 forward of 37 small modules: 667
us plain, 873 us with one global pre-hook that only compared ids, +31%). A stepless
inference loop keeps its forward source for the whole run, so instead the root's class
gets a ``__call__`` that marks a step when the root itself is called on its thread and
then calls the class's own ``__call__`` unchanged: one Python call per call of a module
of that class, and every module keeps torch's fast path. The class attribute is put
back when the source goes (a class is pickled by reference: ``torch.save(model)`` holds
nothing of gpudoctor's); a class that refuses the attribute keeps the global pre-hook.
The forward source exists only while no higher-precedence source is active: the first
optimizer step, backward call or loader batch removes it, and the agent's thread
installs the learning hooks again when every source has gone quiet (an evaluation phase
with no loader, after training).

Neither is installed under torch.compile (a hook changes what dynamo traces); the
compile wrapper removes them before the compiled code first runs, and each hook does
nothing while dynamo traces.
"""

from __future__ import annotations

import threading
import time
import weakref

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

    from torch.nn import Module
    from torch.utils.hooks import RemovableHandle

    from .protocol import StepSource
    from .torch_hooks import TorchHooks

LEARN_CALLS = 4
_MISSING = object()


def _is_compiling(torch: ModuleType) -> Callable[[], bool]:
    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    if check is None:
        check = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    return check if check is not None else (lambda: False)


class BackwardSteps:
    def __init__(self, hooks: TorchHooks) -> None:
        self.hooks = hooks
        self.active = 0
        self.lock = threading.Lock()
        self.original: Callable[..., Any] | None = None

    def install(self) -> None:
        torch = self.hooks.torch
        autograd = torch.autograd
        original = autograd.backward
        compiling = _is_compiling(torch)
        this = self

        def backward(*args, **kwargs):  # type: (*Any, **Any) -> Any
            if compiling():
                return original(*args, **kwargs)
            with this.lock:
                outer = this.active == 0
                this.active += 1
            began = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                with this.lock:
                    this.active -= 1
            if outer:
                try:
                    # DDP's gradient all-reduce waits inside backward: time here tells a rank
                    # that waits for a slower peer (gpudoctor/analysis/ranks.py)
                    this.hooks.steps.add_backward(time.perf_counter() - began)
                    this.hooks.steps.boundary("backward")
                except Exception as exc:  # noqa: BLE001 (the step is lost, never the backward)
                    this.hooks.agent.error("backward_step", exc)
            return result

        for name in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(backward, name, getattr(original, name))
            except (AttributeError, TypeError):
                pass
        backward.__wrapped__ = original  # type: ignore[attr-defined]  # functools' marker, set on a plain function
        self.original = original
        autograd.backward = backward


class ForwardSteps:
    def __init__(self, hooks: TorchHooks) -> None:
        self.hooks = hooks
        self.torch = hooks.torch
        self.compiling = _is_compiling(hooks.torch)
        self.tls = threading.local()
        self.pre_handle: RemovableHandle | None = None
        self.post_handle: RemovableHandle | None = None
        self.generation = 0
        self.root_id: int | None = None
        self.root_thread: int | None = None
        self.root_ref: weakref.ref[Module] | None = None
        self.root_name: str | None = None
        self.candidates: dict[tuple[int, int], list[int]] = {}  # (id(module), thread) -> [depth-0 calls, order]
        self.lock = threading.RLock()  # the root's weakref callback may run inside a locked section
        # the root's class, its own ``__call__`` before ours (or _MISSING), and ours
        self.patched: tuple[type, object, object] | None = None

    @property
    def installed(self) -> bool:
        return self.pre_handle is not None or self.patched is not None

    def install(self) -> None:
        """Start learning the root module (any thread: registering is one dict insert)."""
        with self.lock:
            if self.pre_handle is not None or self.hooks.compile_used:
                return
            from torch.nn.modules import module

            self.generation += 1
            self.root_id = self.root_thread = self.root_ref = None
            self.candidates = {}
            self.pre_handle = module.register_module_forward_pre_hook(self._pre)
            try:
                self.post_handle = module.register_module_forward_hook(self._post, always_call=True)
            except TypeError:  # torch without always_call: a forward that raises leaves depth behind
                self.post_handle = module.register_module_forward_hook(self._post)

    def remove(self) -> None:
        with self.lock:
            pre, post = self.pre_handle, self.post_handle
            self.pre_handle = self.post_handle = None
            self.root_id = self.root_ref = None
            patched, self.patched = self.patched, None
        if patched is not None:
            self._unwrap_class(*patched)
        for handle in (pre, post):
            if handle is not None:
                try:
                    handle.remove()
                except Exception:  # noqa: BLE001 (the hook may already be gone)
                    pass

    def _depth(self) -> list[int]:
        state = getattr(self.tls, "state", None)
        if state is None or state[0] != self.generation:
            state = self.tls.state = [self.generation, 0]
        return state

    def _pre(self, module, args):  # type: (Module, tuple[Any, ...]) -> None
        try:
            root = self.root_id
            if root is not None:  # the hot path: one id comparison per module call
                if id(module) == root and threading.get_ident() == self.root_thread and not self.compiling():
                    self.hooks.steps.boundary("forward")
                return None
            if self.compiling():
                return None
            state = self._depth()
            state[1] += 1
            if state[1] == 1:
                self._learn(module)
        except Exception as exc:  # noqa: BLE001 (the step source is lost, never the forward)
            self.hooks.agent.error("forward_step", exc)
        return None

    def _post(self, module, args, output):  # type: (Module, tuple[Any, ...], Any) -> None
        if self.compiling():
            return None
        try:
            state = self._depth()
            if state[1] > 0:
                state[1] -= 1
        except Exception:  # noqa: BLE001 (the workload's forward is never disturbed)
            pass
        return None

    def _learn(self, module: Module) -> None:
        if self.torch.utils.data.get_worker_info() is not None:
            self.remove()  # a DataLoader worker's transforms are not the workload's steps
            return
        key = (id(module), threading.get_ident())
        entry = self.candidates.setdefault(key, [0, len(self.candidates)])
        entry[0] += 1
        if entry[0] < LEARN_CALLS:
            return
        post = self.post_handle
        self.post_handle = None
        if post is not None:
            post.remove()
        self.root_thread = key[1]
        self.root_name = type(module).__name__
        try:
            self.root_ref = weakref.ref(module, self._root_gone)
        except TypeError:
            self.root_ref = None
        self.root_id = key[0]
        if self._wrap_class(type(module)):
            pre, self.pre_handle = self.pre_handle, None
            if pre is not None:
                pre.remove()  # every module back on torch's fast path
        self.hooks.agent.emit("forward_root", module=self.root_name, thread=threading.current_thread().name)
        self.hooks.steps.boundary("forward")  # this call starts a step too

    def _wrap_class(self, cls: type) -> bool:
        """Give the root's class a ``__call__`` that marks the root's steps; False when it refuses one."""
        before = cls.__dict__.get("__call__", _MISSING)
        original = cls.__call__
        this = self
        compiling = self.compiling

        def __call__(module, *args, **kwargs):  # type: (Module, *Any, **Any) -> Any
            if id(module) == this.root_id and threading.get_ident() == this.root_thread and not compiling():
                try:
                    this.hooks.steps.boundary("forward")
                except Exception as exc:  # noqa: BLE001 (the step is lost, never the forward)
                    this.hooks.agent.error("forward_step", exc)
            return original(module, *args, **kwargs)

        try:
            cls.__call__ = __call__  # type: ignore[method-assign]  # the root's class, put back by remove()
        except (AttributeError, TypeError):
            return False
        with self.lock:
            self.patched = (cls, before, __call__)
        return True

    def _unwrap_class(self, cls: type, before: object, ours: object) -> None:
        try:
            if cls.__dict__.get("__call__") is not ours:
                return  # wrapped again by someone else since: ours stays, inert (no root)
            if before is _MISSING:
                delattr(cls, "__call__")
            else:
                setattr(cls, "__call__", before)  # noqa: B010 (the class's own attribute, as it was)
        except Exception as exc:  # noqa: BLE001 (reported; ours is inert without a root)
            self.hooks.agent.error("forward_unwrap", exc)

    def _root_gone(self, ref: weakref.ref[Module]) -> None:
        if ref is self.root_ref:
            self.remove()  # learned again by the agent's thread once the run goes quiet


class StepSources:
    """backward and forward sources together, and when the forward hooks may exist."""

    def __init__(self, hooks: TorchHooks) -> None:
        self.hooks = hooks
        self.backward = BackwardSteps(hooks)
        self.forward = ForwardSteps(hooks)

    def install(self) -> None:
        self.backward.install()
        if not self.hooks.compile_used:
            self.forward.install()
        try:
            import os

            os.register_at_fork(after_in_child=self.forked)
        except (AttributeError, ValueError):
            pass

    def on_step(self, source: StepSource) -> None:
        if source != "forward" and self.forward.installed:
            self.forward.remove()  # a better source is active: module calls go back to torch's fast path

    def poll(self) -> None:
        """On the agent's thread: learn the forward root again once every source went quiet."""
        if not self.forward.installed and not self.hooks.compile_used and self.hooks.steps.active() is None:
            self.forward.install()

    def remove(self) -> None:
        self.forward.remove()

    def forked(self) -> None:
        """In a forked child (a DataLoader worker): the parent's steps are not its own."""
        try:
            # a lock another thread of the parent held at the fork stays held in the child
            self.forward.lock = threading.RLock()
            self.forward.remove()
            safepoints = getattr(self.hooks, "safepoints", None)
            if safepoints is not None:
                safepoints.lock = threading.Lock()
                safepoints.disarm()
        except Exception:  # noqa: BLE001 (a forked child keeps running unobserved)
            pass
