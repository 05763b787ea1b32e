"""`GpuDoctorCallback` for the ``pytorch_lightning`` package (``import pytorch_lightning as pl``).

Lightning's two packages have separate Callback classes; a ``pytorch_lightning.Trainer``
accepts only this one. For ``lightning.pytorch`` use gpudoctor.integrations.lightning.
"""

from __future__ import annotations

from gpudoctor.integrations._lightning_common import make_callback

try:
    from pytorch_lightning.callbacks import Callback
except ImportError as exc:
    raise ImportError("gpudoctor.integrations.pytorch_lightning needs pytorch_lightning: "
                      "pip install pytorch-lightning") from exc

GpuDoctorCallback = make_callback(Callback)

__all__ = ["GpuDoctorCallback"]
