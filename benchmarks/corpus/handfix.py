"""Apply a source-level remedy to an unmodified script from outside, then run the script.

    python handfix.py FIX[,FIX...] -- SCRIPT [ARGS...]

What a user would add at the top of their script, for the public scripts that have no flag
for it. The fixes (independent of gpudoctor's ``--try`` overrides, which are what is being
judged):

- ``tf32``: ``torch.set_float32_matmul_precision("high")`` and cuDNN TF32;
- ``cudnn-benchmark``: ``torch.backends.cudnn.benchmark = True``;
- ``fused-optimizer``: SGD, Adam and AdamW built with ``fused=True`` where the script does
  not choose and its parameters are floating point on a CUDA or CPU device (torch has fused
  kernels for both): scripts commonly build the optimizer before the model moves to the GPU
  (the DDP tutorial, Fabric's ``setup``), and the GPU's fused kernel is the one each step
  then runs;
- ``pin-memory``: every DataLoader with ``pin_memory=True``;
- ``workers=N``: every DataLoader with ``num_workers=N`` and ``persistent_workers=True``.
"""

from __future__ import annotations

import functools
import os
import runpy
import sys
from typing import Any


def _loader_defaults(**forced: Any) -> None:
    from torch.utils.data import DataLoader

    original = DataLoader.__init__

    @functools.wraps(original)
    def init(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        kwargs.update(forced)
        original(self, *args, **kwargs)

    DataLoader.__init__ = init  # type: ignore[method-assign]


def _fused_optimizers() -> None:
    import torch

    for cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
        original = cls.__init__

        def init(self, params, *args, _original=original, **kwargs) -> None:  # type: ignore[no-untyped-def]
            if isinstance(params, torch.Tensor):
                params = [params]
            params = [{**g, "params": [g["params"]] if isinstance(g["params"], torch.Tensor) else list(g["params"])}
                      if isinstance(g, dict) else g for g in params]
            tensors = [p for group in params for p in (group["params"] if isinstance(group, dict) else [group])]
            if "fused" not in kwargs and "foreach" not in kwargs and tensors and all(
                    t.is_floating_point() and t.device.type in ("cuda", "cpu") for t in tensors):
                kwargs["fused"] = True
            _original(self, params, *args, **kwargs)

        cls.__init__ = init  # type: ignore[method-assign]


def apply(fixes: list[str]) -> None:
    import torch

    for fix in fixes:
        if fix == "tf32":
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.allow_tf32 = True
        elif fix == "cudnn-benchmark":
            torch.backends.cudnn.benchmark = True
        elif fix == "fused-optimizer":
            _fused_optimizers()
        elif fix == "pin-memory":
            _loader_defaults(pin_memory=True)
        elif fix.startswith("workers="):
            _loader_defaults(num_workers=int(fix.split("=", 1)[1]), persistent_workers=True)
        else:
            raise SystemExit(f"handfix: unknown fix {fix!r}")


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        raise SystemExit(__doc__)
    apply([f for f in sys.argv[1].split(",") if f])
    sys.argv = sys.argv[3:]
    sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python SCRIPT` would have it
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
