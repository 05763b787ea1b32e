"""The sweep on a real GPU: CUDA events, NVML readings, a real OOM, a sticky CUDA error.

Skipped on machines without CUDA (CI); run on a GPU with `pytest -m gpu tests/sweep`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoctor.base import exitcodes
from gpudoctor.cli import main

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.integration,  # sweeps run in worker processes
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

HERE = Path(__file__).parent
EXAMPLES = HERE.parent.parent / "examples" / "sweep_targets.py"
FAST = ["--device", "cuda", "--min-time-s", "0.3", "--max-time-s", "2"]


def run(tmp_path: Path, name: str, *args: str) -> tuple[int, dict]:
    code = main(["sweep", *args, *FAST, "--out", str(tmp_path / name), "--quiet"])
    return code, json.loads((tmp_path / f"{name}.json").read_text())


def test_a_gpu_sweep_times_with_events_and_reads_nvml(tmp_path: Path) -> None:
    code, report = run(tmp_path, "tb", f"{EXAMPLES}:transformer_block", "--mode", "train", "--dtype", "bfloat16",
                       "--batch-sizes", "1,8")
    assert code == exitcodes.OK
    for trial in report["trials"]:
        assert trial["status"] == "ok", trial["message"]
        assert trial["timing"]["timer"] == "cuda_events"
        assert trial["memory"]["peak_allocated_bytes"] > 0 and trial["memory"]["peak_reserved_bytes"] > 0
        assert trial["gpu"]["power_w_mean"] > 0 and trial["gpu"]["power_limit_w"] > 0, trial["gpu"]
    assert report["device"]["type"] == "cuda" and report["environment"]["cuda"]


def test_a_real_out_of_memory_is_bisected(tmp_path: Path) -> None:
    code, report = run(
        tmp_path, "hog", f"{HERE / 'gpu_targets.py'}:memory_hog", "--mode", "infer", "--max-batch", "256"
    )
    assert code == exitcodes.OK
    edge = report["results"]["memory_edge"]
    assert edge["found"], report["stop_reason"]
    gap = edge["smallest_oom"] - edge["largest_fit"]
    # within 5% of the size that fits, or no multiple of 8 between the two
    assert gap <= max(1, edge["largest_fit"] * 0.05) or (edge["largest_fit"] >= 64 and gap <= 8)
    assert any(t["status"] == "ok" and t["batch_size"] == edge["largest_fit"] for t in report["trials"])


def test_a_device_side_assert_stops_the_sweep(tmp_path: Path) -> None:
    code, report = run(
        tmp_path, "assert", f"{HERE / 'gpu_targets.py'}:device_assert", "--mode", "infer", "--batch-sizes", "1,2,4,8"
    )
    assert code == 1 and report["failed"]
    statuses = [(t["batch_size"], t["status"]) for t in report["trials"]]
    assert statuses == [(1, "ok"), (2, "ok"), (4, "cuda_error"), (8, "skipped")]
