"""Golden sweeps: the JSON, the terminal summary and the HTML report of deterministic
synthetic sweeps (the fake runners of test_reports) must equal the files under
tests/sweep/golden/. The creation time and the tool version are pinned first.

Regenerate after an intended change, and review the diff:

    GPUDOCTOR_UPDATE_GOLDEN=1 python -m pytest tests/sweep/test_golden_sweep.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.reports import sweep_html, sweep_terminal

from .test_reports import cpu_report, synthetic_report

GOLDEN = Path(__file__).parent / "golden"

CASES: dict[str, Callable[[], Any]] = {
    "gpu_infer_budget": lambda: synthetic_report("infer", 0.05),
    "gpu_train": lambda: synthetic_report("train", None),
    "cpu_train": cpu_report,
}


def pinned(name: str) -> dict[str, Any]:
    """The case's sweep JSON as written (indent=1), with the time and version pinned."""
    data: dict[str, Any] = json.loads(json.dumps(CASES[name](), indent=1, allow_nan=False))
    data["created_at"] = "2026-01-01T00:00:00+00:00"
    data["tool"]["version"] = "<version>"
    return data


def outputs(name: str) -> dict[str, str]:
    data = pinned(name)
    return {
        "json": json.dumps(data, indent=1, allow_nan=False) + "\n",
        "txt": sweep_terminal.to_text(data, width=160),
        "html": sweep_html.render(data),
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_sweep_outputs_match_golden(name: str) -> None:
    for ext, text in outputs(name).items():
        target = GOLDEN / f"{name}.sweep.{ext}"
        if os.environ.get("GPUDOCTOR_UPDATE_GOLDEN"):
            target.write_text(text, encoding="utf-8")
        assert target.exists(), f"{target.name} missing: run with GPUDOCTOR_UPDATE_GOLDEN=1"
        assert text == target.read_text(encoding="utf-8"), f"{target.name} differs"


def test_golden_sweeps_say_something() -> None:
    data = json.loads((GOLDEN / "gpu_infer_budget.sweep.json").read_text(encoding="utf-8"))
    assert data["schema"] == "gpudoctor.sweep/1"
    assert data["results"]["knee"]["batch_size"] == 64
    assert data["results"]["memory_edge"]["largest_fit"] == 392
    assert "knee (64)" in (GOLDEN / "gpu_infer_budget.sweep.html").read_text(encoding="utf-8")
