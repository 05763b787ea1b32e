"""The Hugging Face Trainer callback on CPU: a tiny model, a few optimizer steps, the report at the end."""

from __future__ import annotations

import json

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

from gpudoctor.integrations.hf import GpuDoctorCallback  # noqa: E402  (only once its requirements are there)


class Tiny(torch.nn.Module):
    def __init__(self, fail_at: int | None = None):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.calls = 0
        self.fail_at = fail_at

    def forward(self, x, labels=None):
        self.calls += 1
        if self.fail_at is not None and self.calls > self.fail_at:
            raise RuntimeError("nan loss")
        out = self.layer(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class Data(torch.utils.data.Dataset):
    def __init__(self, n: int = 64):
        self.x, self.y = torch.randn(n, 8), torch.randn(n, 1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def _trainer(tmp_path, callback, model=None, **kw):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, report_to=[], use_cpu=True,
        save_strategy="no", disable_tqdm=True, logging_strategy="no", dataloader_num_workers=0, **kw)
    return transformers.Trainer(model=model or Tiny(), args=args, train_dataset=Data(), callbacks=[callback])


def test_train_writes_the_report_beside_the_outputs(tmp_path):
    callback = GpuDoctorCallback(interval=0.1, verbose=False)
    _trainer(tmp_path, callback, max_steps=16).train()
    report = callback.report
    assert report is not None and report.summary["step_source"] == "explicit"
    assert report.summary["steps"] >= 16
    html = callback.files["html"]
    assert html.parent == tmp_path / "out" / "gpudoctor"
    assert json.loads(callback.files["json"].read_text())["source"] == "watch"


def test_gradient_accumulation_counts_optimizer_steps(tmp_path):
    callback = GpuDoctorCallback(out=str(tmp_path / "r") + "/", interval=0.1, verbose=False)
    _trainer(tmp_path, callback, max_steps=6, gradient_accumulation_steps=2).train()
    assert 6 <= callback.report.summary["steps"] <= 7


def test_the_window_opens_after_the_warmup_steps(tmp_path, monkeypatch):
    from gpudoctor.agent.torch_hooks import TorchHooks

    monkeypatch.setattr(TorchHooks, "cuda_initialized", lambda self: True)  # CPU machine: pretend
    callback = GpuDoctorCallback(warmup_steps=3, profile_steps=5, interval=0.1, verbose=False)
    _trainer(tmp_path, callback, max_steps=14).train()
    profile = callback.report.session.profile
    assert profile is not None and profile.steps == 5
    assert not torch.autograd._profiler_enabled()


def test_a_crash_in_a_notebook_style_session_is_closed_by_the_next_train(tmp_path):
    callback = GpuDoctorCallback(interval=0.1, verbose=False)
    with pytest.raises(RuntimeError, match="nan loss"):
        _trainer(tmp_path, callback, model=Tiny(fail_at=5), max_steps=16).train()
    assert callback.report is None  # the Trainer has no exception hook: the watch is still open
    callback.close()
    assert callback.report is not None
    _trainer(tmp_path, GpuDoctorCallback(interval=0.1, verbose=False), max_steps=4).train()  # a new watch works


SCRIPT = '''
import sys, torch, transformers
sys.path.insert(0, {here!r})
from test_hf import Tiny, Data
from gpudoctor.integrations.hf import GpuDoctorCallback
args = transformers.TrainingArguments(output_dir={out!r}, per_device_train_batch_size=4, report_to=[], use_cpu=True,
                                      save_strategy="no", disable_tqdm=True, logging_strategy="no", max_steps=16)
transformers.Trainer(model=Tiny(fail_at=8), args=args, train_dataset=Data(),
                     callbacks=[GpuDoctorCallback(interval=0.1)]).train()
'''


@pytest.mark.integration
def test_a_script_that_dies_in_train_still_writes_the_report(tmp_path):
    """No on_exception in the Trainer: the uncaught exception reaches sys.excepthook, which ends the watch."""
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "out"
    script = SCRIPT.format(here=str(Path(__file__).parent), out=str(out))
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 1 and "nan loss" in done.stderr  # the program's own ending, unchanged
    (report,) = [p for p in (out / "gpudoctor").glob("*.json") if not p.name.endswith(".session.json")]
    data = json.loads(report.read_text())
    assert any(f["id"] == "GD001" and "RuntimeError" in f["message"] for f in data["findings"])
    assert "gpudoctor: " in done.stderr  # the one line saying where the report went
