"""One iteration of the target, as a zero-argument callable: infer or train.

The batch is made once per trial and reused every iteration: the sweep measures the
model at a batch size, not the input pipeline (that is `gpudoctor diagnose`'s job).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpudoctor.sweep.target import SweepTarget, TargetProblem


@dataclass
class PreparedStep:
    step: Callable[[], None]
    model_bytes: int  # parameters and buffers
    notes: list[str]


def to_device(obj: Any, device: Any, torch: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, dict):
        return type(obj)((k, to_device(v, device, torch)) for k, v in obj.items())
    if isinstance(obj, (tuple, list)):
        items = [to_device(v, device, torch) for v in obj]
        if hasattr(obj, "_fields"):  # a namedtuple takes its fields positionally
            return type(obj)(*items)
        return type(obj)(items)
    return obj


def make(make_batch: Callable[..., Any], batch_size: int, device: Any) -> Any:
    """make_batch(n), or make_batch(n, device=...) when it takes a device: a batch of
    gigabytes is then made where it is used instead of on the host and copied."""
    try:
        params = inspect.signature(make_batch).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    if "device" in params:
        return make_batch(batch_size, device=device)
    return make_batch(batch_size)


def default_forward(model: Any, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _tensors(obj: Any, torch: Any) -> Iterator[Any]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value, torch)
    elif isinstance(obj, (tuple, list)):
        for value in obj:
            yield from _tensors(value, torch)


def default_loss(output: Any, torch: Any) -> Any:
    """The output's `.loss` (Hugging Face style), else the mean of its float tensors.

    A mean costs one small reduction: the backward pass it starts is the full one, so
    the step time is that of real training up to the loss function itself.
    """
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
        return loss
    parts = [t.float().mean() for t in _tensors(output, torch) if t.is_floating_point() and t.requires_grad]
    if not parts:
        raise TargetProblem(
            "cannot make a default loss: the model output has no floating tensor that requires grad; give loss_fn",
            "bad_data",
        )
    return sum(parts[1:], parts[0])


def _autocast(device: Any, dtype: str, torch: Any) -> Callable[[], Any]:
    if dtype == "float32":
        return contextlib.nullcontext
    torch_dtype = getattr(torch, dtype)
    return lambda: torch.autocast(device_type=device.type, dtype=torch_dtype)


def prepare(
    target: SweepTarget, mode: str, batch_size: int, device: Any, dtype: str, compile: bool, torch: Any
) -> PreparedStep:
    notes: list[str] = []
    model = target.model.to(device)
    model.train(mode == "train")
    model_bytes = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    runner = torch.compile(model) if compile else model
    forward = target.forward or default_forward
    batch = to_device(make(target.make_batch, batch_size, device), device, torch)
    if not any(True for _ in _tensors(batch, torch)):
        raise TargetProblem(f"make_batch({batch_size}) returned no tensor ({type(batch).__name__})", "bad_data")
    autocast = _autocast(device, dtype, torch)

    if mode == "infer":

        def infer_step() -> None:
            with torch.inference_mode(), autocast():
                forward(runner, batch)

        return PreparedStep(infer_step, model_bytes, notes)

    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise TargetProblem("the model has no trainable parameters: nothing to train (use --mode infer)", "bad_data")
    optimizer = target.optimizer
    if optimizer is None:
        # lr=0: the update kernels run (their cost is part of a step) but the weights stay
        # put, so thousands of steps on random data never drift into inf/NaN territory.
        optimizer = torch.optim.SGD(trainable, lr=0.0)
        notes.append("optimizer: SGD(lr=0) (default; give yours to measure its memory and cost)")
    if target.loss_fn is None:
        notes.append("loss: mean of the output (default)")
    if dtype == "float16":
        notes.append("float16 without a GradScaler: its unscale and inf checks (small) are not timed")
    loss_fn = target.loss_fn

    def train_step() -> None:
        with autocast():
            output = forward(runner, batch)
            loss = loss_fn(output, batch) if loss_fn is not None else default_loss(output, torch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return PreparedStep(train_step, model_bytes, notes)
