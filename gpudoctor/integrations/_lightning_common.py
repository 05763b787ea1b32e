"""The Lightning callback, built on whichever Callback class the user's Trainer checks for.

`lightning.pytorch` and the older `pytorch_lightning` package each have their own
Callback class, and a Trainer accepts only its own: lightning.py and
pytorch_lightning.py each build the same callback on theirs.
"""

from __future__ import annotations

from typing import Any

from gpudoctor.integrations._training import TrainingWatch


def make_callback(base: type) -> type:
    class GpuDoctorCallback(base):  # type: ignore[misc, valid-type, unused-ignore]
        """Diagnose a Lightning fit: watch from train start to train end, one step per batch.

        GpuDoctorCallback(name="lightning", out=None, steps=None, all_ranks=False, verbose=True,
        **options): `out` is where the report set goes (default ./gpudoctor-reports/), `steps`
        ends the watch after that many training batches (the rest runs unobserved), other
        options are gpudoctor.watch()'s (warmup_steps, profile_steps, interval, ...). Only
        global rank 0 is watched unless `all_ranks`. After fit: `.report`, `.files`.
        """

        def __init__(self, name: str = "lightning", *, out: str | None = None, steps: int | None = None,
                     all_ranks: bool = False, verbose: bool = True, **options: Any) -> None:
            super().__init__()
            self.all_ranks = all_ranks
            self._training = TrainingWatch(name, out=out, steps=steps, verbose=verbose, options=options)

        @property
        def report(self) -> Any:
            return self._training.report

        @property
        def files(self) -> dict[str, Any]:
            return self._training.files

        def close(self) -> None:
            """End a watch that training left running (a failed fit in a notebook)."""
            self._training.end()

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if self.all_ranks or getattr(trainer, "is_global_zero", True):
                self._training.begin()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                               batch_idx: int) -> None:
            self._training.step()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self._training.end()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self._training.end(type(exception), exception, exception.__traceback__)

    return GpuDoctorCallback
