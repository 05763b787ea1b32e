"""`GpuDoctorCallback` for the Hugging Face ``transformers.Trainer``.

    from transformers import Trainer
    from gpudoctor.integrations.hf import GpuDoctorCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[GpuDoctorCallback()])
    trainer.train()        # the report goes to <args.output_dir>/gpudoctor/ unless out= says where

One step per optimizer step (``on_step_end``: with gradient accumulation, one step
covers the accumulated micro-batches). The watch starts at ``on_train_begin``, so the
profiler window opens after the warm-up steps of training; the report is written at
``on_train_end``, or when the training dies with an uncaught exception.
"""

from __future__ import annotations

import os
from typing import Any

from gpudoctor.integrations._training import TrainingWatch

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise ImportError("gpudoctor.integrations.hf needs transformers: pip install transformers accelerate "
                      "(or pip install 'gpudoctor[integrations]')") from exc


class GpuDoctorCallback(TrainerCallback):  # type: ignore[misc, unused-ignore]
    """GpuDoctorCallback(name="trainer", out=None, steps=None, all_ranks=False, verbose=True, **options):
    `out` is where the report set goes (default <output_dir>/gpudoctor/), `steps` ends the
    watch after that many optimizer steps (the rest runs unobserved), other options are
    gpudoctor.watch()'s. Only the main process is watched unless `all_ranks`.
    After training: `.report`, `.files`."""

    def __init__(self, name: str = "trainer", *, out: str | None = None, steps: int | None = None,
                 all_ranks: bool = False, verbose: bool = True, **options: Any) -> None:
        self.all_ranks = all_ranks
        self._training = TrainingWatch(name, out=out, steps=steps, verbose=verbose, options=options)

    @property
    def report(self) -> Any:
        return self._training.report

    @property
    def files(self) -> dict[str, Any]:
        return self._training.files

    def close(self) -> None:
        """End a watch that training left running (a failed train() in a notebook)."""
        self._training.end()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.all_ranks or getattr(state, "is_world_process_zero", True):
            output_dir = getattr(args, "output_dir", None)
            self._training.begin(os.path.join(output_dir, "gpudoctor") + os.sep if output_dir else None)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._training.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._training.end()


__all__ = ["GpuDoctorCallback"]
