"""The Lightning callback on CPU: a tiny model, a few steps, the report at the end of fit."""

from __future__ import annotations

import json
import sys

import pytest

pl = pytest.importorskip("lightning.pytorch")
torch = pytest.importorskip("torch")

from gpudoctor.integrations.lightning import GpuDoctorCallback  # noqa: E402  (only once lightning is there)


class Tiny(pl.LightningModule):
    def __init__(self, fail_at: int | None = None):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.fail_at = fail_at

    def training_step(self, batch, batch_idx):
        if self.fail_at is not None and batch_idx == self.fail_at:
            raise RuntimeError("diverged")
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader(n: int = 96):
    from torch.utils.data import DataLoader, TensorDataset

    return DataLoader(TensorDataset(torch.randn(n, 8), torch.randn(n, 1)), batch_size=4)


def _trainer(callback, tmp_path, **kw):
    return pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, callbacks=[callback], logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=str(tmp_path), **kw)


def test_fit_writes_the_report_with_one_step_per_batch(tmp_path):
    callback = GpuDoctorCallback(out=str(tmp_path / "reports") + "/", interval=0.1, verbose=False)
    _trainer(callback, tmp_path).fit(Tiny(), _loader())
    report = callback.report
    assert report is not None
    assert report.summary["step_source"] == "explicit" and report.summary["steps"] >= 24
    assert {"html", "json", "session"} <= set(callback.files)
    saved = json.loads(callback.files["json"].read_text())
    assert saved["summary"]["steps"] == report.summary["steps"] and saved["source"] == "watch"
    assert sys.excepthook is sys.__excepthook__ or "TrainingWatch" not in repr(sys.excepthook)


def test_the_window_opens_at_the_warmup_step_of_training(tmp_path, monkeypatch):
    from gpudoctor.agent.torch_hooks import TorchHooks

    monkeypatch.setattr(TorchHooks, "cuda_initialized", lambda self: True)  # CPU machine: pretend
    callback = GpuDoctorCallback(warmup_steps=4, profile_steps=6, interval=0.1, verbose=False)
    _trainer(callback, tmp_path, num_sanity_val_steps=0).fit(Tiny(), _loader())
    profile = callback.report.session.profile
    assert profile is not None and profile.steps == 6
    assert not torch.autograd._profiler_enabled()


def test_steps_ends_the_watch_early_and_training_goes_on(tmp_path):
    callback = GpuDoctorCallback(steps=8, interval=0.1, verbose=False)
    trainer = _trainer(callback, tmp_path)
    trainer.fit(Tiny(), _loader())
    assert trainer.global_step == 24  # all of it trained
    assert 8 <= callback.report.summary["steps"] <= 10


def test_a_failing_fit_still_reports_the_crash(tmp_path):
    callback = GpuDoctorCallback(interval=0.1, verbose=False)
    with pytest.raises(RuntimeError, match="diverged"):
        _trainer(callback, tmp_path).fit(Tiny(fail_at=10), _loader())
    finding = callback.report.finding("GD001")
    assert finding is not None and "RuntimeError" in finding["message"]


def test_the_pytorch_lightning_package_has_its_own_callback(tmp_path):
    legacy = pytest.importorskip("pytorch_lightning")
    from gpudoctor.integrations.pytorch_lightning import GpuDoctorCallback as LegacyCallback

    class LegacyTiny(legacy.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    callback = LegacyCallback(interval=0.1, verbose=False)
    trainer = legacy.Trainer(max_steps=12, accelerator="cpu", devices=1, callbacks=[callback], logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=str(tmp_path))
    trainer.fit(LegacyTiny(), _loader())
    assert callback.report.summary["steps"] >= 12
