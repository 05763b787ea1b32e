"""`GpuDoctorCallback` for Lightning (``lightning.pytorch``; falls back to ``pytorch_lightning``).

    from lightning.pytorch import Trainer
    from gpudoctor.integrations.lightning import GpuDoctorCallback

    trainer = Trainer(max_epochs=1, callbacks=[GpuDoctorCallback(out="reports/")])
    trainer.fit(model, datamodule)
"""

from __future__ import annotations

from gpudoctor.integrations._lightning_common import make_callback

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the standalone package only
    try:
        from pytorch_lightning.callbacks import Callback  # type: ignore[assignment]
    except ImportError as exc:
        raise ImportError("gpudoctor.integrations.lightning needs Lightning: pip install lightning "
                          "(or pip install 'gpudoctor[integrations]')") from exc

GpuDoctorCallback = make_callback(Callback)

__all__ = ["GpuDoctorCallback"]
