"""Every entry point tells the same truth on one input-bound loop (tests/workloads/input_bound_entry.py).

Heavy per-sample CPU work in ``__getitem__`` with ``num_workers=0``: `watch()`, the Lightning
callback (whose fetcher creates and prefetches from the DataLoader's iterator before
``on_train_start``), the Hugging Face callback and accelerate's prepared DataLoader must all
report the data stall (GD102) and name a concrete worker count (GD101), as `diagnose` does
(tests/e2e/test_entry_points_e2e.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "workloads"))
import input_bound_entry as workload  # noqa: E402  (the shared workload, from tests/workloads)

STEPS = 30
pytestmark = pytest.mark.integration  # real training for seconds each, as the e2e tests


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workload does: one core for the loop
    yield
    torch.set_num_threads(threads)


def assert_input_bound(report: Any) -> None:
    """The data stage found and sized: GD102 with its measured share, GD101 with a worker count."""
    assert report is not None
    assert report.summary["data_wait_share"] is not None and report.summary["data_wait_share"] >= 0.5, report.verdict
    assert report.verdict.startswith("Input-bound"), report.verdict
    stall = report.finding("GD102")
    assert stall is not None and stall["severity"] in ("warning", "critical"), report.verdict
    workers = report.finding("GD101")
    if workers is None:
        # on a machine with one spare core, one worker mostly moves the same work out of the loop:
        # GD101 then gives no advice, and the stall's remedy says why (as diagnose does)
        assert (report.summary.get("usable_cores") or 0) < 3, [f["id"] for f in report.findings]
        assert "more workers would not help" in stall["remedy"]["text"], stall["remedy"]
        return
    recommended = workers["evidence"]["recommended_workers"]["value"]
    assert isinstance(recommended, int) and recommended >= 1
    assert f"num_workers={recommended}" in workers["remedy"]["code"]


def test_watch_around_a_plain_loop(tmp_path):
    import gpudoctor

    with gpudoctor.watch("plain", out=str(tmp_path) + "/", interval=0.2, progress=False) as w:
        workload.train_plain(STEPS, workers=0)
    assert_input_bound(w.report())


@pytest.mark.parametrize("data", ["loader", "combined", "stream"])
def test_lightning_callback_sees_the_loader_its_fetcher_iterates(tmp_path, data):
    """The fetcher creates the iterator before on_train_start; a CombinedLoader iterates two
    loaders; a loader without a length makes the fetcher prefetch a batch ahead."""
    pytest.importorskip("lightning.pytorch")
    from gpudoctor.integrations.lightning import GpuDoctorCallback

    callback = GpuDoctorCallback(out=str(tmp_path) + "/", interval=0.2, verbose=False)
    workload.lightning_trainer(STEPS, [callback], root=str(tmp_path)).fit(workload.lit_net(0, data))
    report = callback.report
    assert_input_bound(report)
    loaders = report.session.loaders
    assert len(loaders) == (2 if data == "combined" else 1)
    assert all(lo.batches >= STEPS - 2 for lo in loaders)  # a batch or two came before the watch


def test_a_second_watch_adopts_the_iterator_the_first_one_registered(tmp_path):
    import gpudoctor

    data = iter(workload.loader(0))
    with gpudoctor.watch("first", out=str(tmp_path / "a") + "/", interval=0.2, progress=False, profile=False):
        next(data)
    with gpudoctor.watch("second", out=str(tmp_path / "b") + "/", interval=0.2, progress=False) as w:
        workload.train_plain(STEPS, workers=0, data=data)
    assert_input_bound(w.report())


def test_accelerate_prepared_loader(tmp_path):
    pytest.importorskip("accelerate")
    import gpudoctor

    with gpudoctor.watch("accelerate", out=str(tmp_path) + "/", interval=0.2, progress=False) as w:
        workload.train_accelerate(STEPS, workers=0)
    assert_input_bound(w.report())


def test_hf_callback(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from gpudoctor.integrations.hf import GpuDoctorCallback

    class Images(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.heavy = workload.HeavyDataset()

        def __len__(self) -> int:
            return len(self.heavy)

        def __getitem__(self, i: int) -> dict[str, Any]:
            x, y = self.heavy[i]
            return {"x": x, "labels": y}

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = workload.Net()

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            logits = self.net(x)
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    callback = GpuDoctorCallback(out=str(tmp_path) + "/", interval=0.2, verbose=False)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=workload.BATCH_SIZE, report_to=[],
        use_cpu=True, save_strategy="no", disable_tqdm=True, logging_strategy="no", dataloader_num_workers=0,
        max_steps=STEPS)
    transformers.Trainer(model=Model(), args=args, train_dataset=Images(), callbacks=[callback]).train()
    assert_input_bound(callback.report)
