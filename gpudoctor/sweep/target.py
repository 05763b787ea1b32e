"""The sweep target: what the user points `gpudoctor sweep` at, and how it is loaded.

The contract (documented in docs/sweep.md):

    def build(batch_size: int | None = None):
        model = ...                                  # a torch.nn.Module
        def make_batch(n: int):                      # n samples of model input
            return torch.randn(n, 3, 224, 224)       # tensor | tuple | list | dict
        return model, make_batch                     # or a dict, or SweepTarget(...)

`build` is called once per trial (once per batch size; the file is loaded again each time), with
`batch_size=` when its signature names it, or takes `**kwargs` and is no nn.Module
factory (torchvision's `resnet50(**kwargs) -> ResNet` passes them to the module).
A plain `nn.Module` class (or a function returning a module) works too, with `--input-shape 3,224,224`.

The parent only parses and pre-checks (no torch import, no user code run); the trial
process loads and validates. Problems with the target itself raise `TargetProblem`,
which carries the exit-code category the CLI reports.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import logging
import os
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TARGET_KEYS = ("model", "make_batch", "loss_fn", "optimizer", "forward")


@dataclass
class SweepTarget:
    """What `build` may return; only `model` and `make_batch` are required.

    model: the torch.nn.Module to measure.
    make_batch: make_batch(n) -> the inputs for n samples (tensor, tuple, list or dict;
        targets may ride along for a custom loss_fn/forward).
    loss_fn: loss_fn(output, batch) -> scalar tensor (train mode). Default: the output's
        `.loss` if it has one, else the mean of every floating tensor in the output.
    optimizer: a torch.optim.Optimizer over model's parameters (train mode). Default:
        SGD with lr=0, which pays for the update kernels without changing the weights.
    forward: forward(model, batch) -> output. Default: model(batch) for a tensor,
        model(*batch) for a tuple/list, model(**batch) for a dict.
    """

    model: Any
    make_batch: Callable[[int], Any]
    loss_fn: Callable[[Any, Any], Any] | None = None
    optimizer: Any | None = None
    forward: Callable[[Any, Any], Any] | None = None


class TargetProblem(Exception):
    """The target cannot be used at all; `category` maps to an exit code in the CLI."""

    def __init__(self, message: str, category: str) -> None:
        super().__init__(message)
        self.category = category  # usage | bad_data | not_found | not_runnable


@dataclass(frozen=True)
class TargetSpec:
    location: str  # a file path or a dotted module name
    attribute: str
    is_file: bool

    @property
    def name(self) -> str:
        """A short name for default output files."""
        stem = Path(self.location).stem if self.is_file else self.location.rsplit(".", 1)[-1]
        return f"{stem}-{self.attribute}"


def parse_target_spec(text: str) -> TargetSpec:
    """`FILE.py:FUNC`, `FILE.py:ClassName` or `package.module:FUNC`."""
    location, sep, attribute = text.rpartition(":")
    if not sep or not location or not attribute.isidentifier():
        raise TargetProblem(
            f"target {text!r}: expected FILE.py:FUNCTION (or FILE.py:ModuleClass, package.module:FUNCTION)",
            "usage",
        )
    is_file = location.endswith(".py") or os.sep in location or "/" in location
    if not is_file and not all(part.isidentifier() for part in location.split(".")):
        raise TargetProblem(f"target {text!r}: {location!r} is neither a .py file nor a module name", "usage")
    return TargetSpec(location=location, attribute=attribute, is_file=is_file)


def precheck(spec: TargetSpec, input_shape: tuple[int, ...] | None) -> None:
    """Fail fast in the parent on what can be seen without running user code."""
    if not spec.is_file:
        return  # importing a package costs seconds and may run code: the trial checks it
    path = Path(spec.location)
    if not path.exists():
        raise TargetProblem(f"{spec.location}: no such file", "not_found")
    if not path.is_file() or path.suffix != ".py":
        raise TargetProblem(f"{spec.location}: not a Python file", "not_runnable")
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise TargetProblem(f"{spec.location}:{exc.lineno}: syntax error: {exc.msg}", "not_runnable") from None
    except (OSError, ValueError) as exc:
        raise TargetProblem(f"{spec.location}: cannot read: {exc}", "not_runnable") from None
    kind = _top_level_kind(tree, spec.attribute)
    if kind is None:
        raise TargetProblem(f"{spec.location}: no function or class named {spec.attribute!r}", "not_found")
    if kind == "class" and input_shape is None:
        raise TargetProblem(
            f"{spec.attribute} is a class: give --input-shape (e.g. 3,224,224) or write a build function",
            "usage",
        )


def _top_level_kind(tree: ast.Module, name: str) -> str | None:
    """'function', 'class', 'other' (assigned/imported), or None when surely absent."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return "function"
        if isinstance(node, ast.ClassDef) and node.name == name:
            return "class"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name.split(".")[0]) == name:
                    return "other"
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(name in {n.id for n in ast.walk(t) if isinstance(n, ast.Name)} for t in targets):
                return "other"
        if isinstance(node, (ast.If, ast.Try, ast.With)) and _defined_anywhere(node, name):
            return "other"
    return None


def _defined_anywhere(node: ast.AST, name: str) -> bool:
    # A conditional definition (try: import ... except: def ...) cannot be judged statically.
    return any(getattr(n, "name", None) == name or getattr(n, "id", None) == name for n in ast.walk(node))


# --- trial side: these run inside the trial process and may import torch ----------


def load_attribute(spec: TargetSpec) -> Any:
    if spec.is_file:
        module = _import_file(Path(spec.location))
    else:
        try:
            module = importlib.import_module(spec.location)
        except ImportError as exc:
            raise TargetProblem(f"cannot import {spec.location}: {exc}", "not_found") from None
    try:
        return getattr(module, spec.attribute)
    except AttributeError:
        raise TargetProblem(f"{spec.location}: no attribute {spec.attribute!r}", "not_found") from None


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise TargetProblem(f"{path}: no such file", "not_found")
    # Like `python file.py`: the file's directory comes first, so sibling imports work.
    folder = str(path.resolve().parent)
    if not sys.path or sys.path[0] != folder:  # once: a reused trial process loads it again per size
        sys.path.insert(0, folder)
    name = f"_gpudoctor_target_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise TargetProblem(f"{path}: not importable as Python", "not_runnable")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001  (any import-time failure of user code is "not runnable")
        raise TargetProblem(f"importing {path} failed: {type(exc).__name__}: {exc}", "not_runnable") from None
    return module


def call_build(build: Callable[..., Any], batch_size: int, module_class: type | None = None) -> Any:
    """Call `build`, passing batch_size= to a parameter of that name, or to `**kwargs` of a
    function that is not an nn.Module factory. A factory such as torchvision's
    `resnet50(**kwargs) -> ResNet` hands its kwargs to the module's constructor, which
    rejects batch_size: it is known by its return annotation, else by that very refusal."""
    try:
        signature = inspect.signature(build)
    except (TypeError, ValueError):
        return build()
    params = signature.parameters
    if "batch_size" in params:
        return build(batch_size=batch_size)
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()) or _returns_module(build, module_class):
        return build()
    try:
        return build(batch_size=batch_size)
    except TypeError as exc:
        if "batch_size" not in str(exc):
            raise
        log.debug("%s refused batch_size= (%s); called without it", build, exc)
        return build()


def _returns_module(build: Callable[..., Any], module_class: type | None) -> bool:
    """Does `build` say (by its return annotation) that it returns an nn.Module?"""
    if module_class is None:
        return False
    try:
        returned = typing.get_type_hints(build).get("return")
    except Exception:  # noqa: BLE001  (an annotation that does not resolve says nothing)
        returned = inspect.signature(build).return_annotation
    return inspect.isclass(returned) and issubclass(returned, module_class)


def normalize(result: Any, input_shape: tuple[int, ...] | None, torch: Any, where: str) -> SweepTarget:
    """Turn what `build` returned into a SweepTarget, or explain what was expected."""
    nn_module = torch.nn.Module
    if isinstance(result, nn_module):
        if input_shape is None:
            raise TargetProblem(
                f"{where} returned an nn.Module without a batch maker: "
                "give --input-shape or return (model, make_batch)",
                "usage",
            )
        return SweepTarget(model=result, make_batch=random_inputs(input_shape, torch))
    if isinstance(result, SweepTarget) or (hasattr(result, "model") and hasattr(result, "make_batch")):
        target = SweepTarget(
            model=result.model,
            make_batch=result.make_batch,
            loss_fn=getattr(result, "loss_fn", None),
            optimizer=getattr(result, "optimizer", None),
            forward=getattr(result, "forward", None),
        )
    elif isinstance(result, dict):
        unknown = sorted(set(result) - set(TARGET_KEYS))
        if unknown or "model" not in result or "make_batch" not in result:
            raise TargetProblem(
                f"{where} returned a dict with keys {sorted(result)}; expected 'model' and "
                f"'make_batch' (optional: loss_fn, optimizer, forward)",
                "bad_data",
            )
        target = SweepTarget(**result)
    elif isinstance(result, (tuple, list)) and 2 <= len(result) <= 3:
        target = SweepTarget(*result)
    else:
        raise TargetProblem(
            f"{where} returned {type(result).__name__}; expected (model, make_batch), a dict or a SweepTarget",
            "bad_data",
        )
    if input_shape is not None:
        raise TargetProblem(f"--input-shape is for a plain nn.Module; {where} already gives make_batch", "usage")
    if not isinstance(target.model, nn_module):
        raise TargetProblem(f"{where}: model is {type(target.model).__name__}, not a torch.nn.Module", "bad_data")
    for name in ("make_batch", "loss_fn", "forward"):
        value = getattr(target, name)
        if value is not None and not callable(value):
            raise TargetProblem(f"{where}: {name} is {type(value).__name__}, not callable", "bad_data")
    return target


def random_inputs(input_shape: tuple[int, ...], torch: Any) -> Callable[[int], Any]:
    def make_batch(n: int) -> Any:
        return torch.randn(n, *input_shape)

    return make_batch


def load_target(text: str, batch_size: int, input_shape: tuple[int, ...] | None, torch: Any) -> SweepTarget:
    """Resolve the spec and build the target; exceptions raised by user code propagate."""
    spec = parse_target_spec(text)
    obj = load_attribute(spec)
    where = f"{spec.attribute}()"
    if inspect.isclass(obj) and issubclass(obj, torch.nn.Module):
        if input_shape is None:
            raise TargetProblem(f"{spec.attribute} is an nn.Module class: give --input-shape", "usage")
        try:
            model = obj()
        except TypeError as exc:
            raise TargetProblem(
                f"{spec.attribute}() needs arguments ({exc}): write a build function that creates it", "usage"
            ) from None
        return SweepTarget(model=model, make_batch=random_inputs(input_shape, torch))
    if not callable(obj):
        raise TargetProblem(
            f"{spec.attribute} is a {type(obj).__name__}, not a function or nn.Module class", "bad_data"
        )
    return normalize(call_build(obj, batch_size, torch.nn.Module), input_shape, torch, where)
