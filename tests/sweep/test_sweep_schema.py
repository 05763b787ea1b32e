"""The published sweep schema (sweep-v1.schema.json): generated from gpudoctor.sweep.sweep_model,
and every sweep fits it. Validated with `jsonschema` (test-only), independent of
gpudoctor.base.jsonmodel, which generates it. (tests/test_report_schema.py keeps the committed
file equal to the generated one.)
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpudoctor import schemas
from gpudoctor.base.jsonmodel import DecodeError
from gpudoctor.reports import sweep_html, sweep_terminal
from gpudoctor.sweep.sweep_model import SWEEP_SCHEMA, SweepReport, as_sweep

from .test_golden_sweep import CASES, GOLDEN, pinned
from .test_reports import synthetic_report

EXAMPLES = sorted((Path(__file__).parents[2] / "docs" / "examples").glob("sweep-*.json"))


@pytest.fixture(scope="module")
def validator() -> Any:
    schema = schemas.load("sweep-v1.schema.json")
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_schema_names_the_sweep_version() -> None:
    schema = schemas.load("sweep-v1.schema.json")
    assert schema["title"] == SWEEP_SCHEMA == "gpudoctor.sweep/1"
    assert {"schema", "tool", "command", "target", "settings", "trials", "results", "recommendations",
            "stop_reason", "failed", "interrupted", "files"} <= set(schema["required"])
    trial = schema["$defs"]["SweepTrial"]
    assert {"batch_size", "status", "timing", "memory", "gpu", "order"} <= set(trial["required"])
    assert "oom" in trial["properties"]["status"]["enum"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_sweeps_fit_the_schema_and_round_trip(name: str, validator: Any) -> None:
    text = (GOLDEN / f"{name}.sweep.json").read_text(encoding="utf-8")
    data = json.loads(text)
    validator.validate(data)
    again = SweepReport.from_dict(data).to_dict()
    assert again == data and json.dumps(again, indent=1) + "\n" == text  # same keys, same order


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_recorded_h200_sweeps_fit_the_schema_and_round_trip(path: Path, validator: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    validator.validate(data)
    again = SweepReport.from_dict(data).to_dict()
    assert again == data and list(again) == list(data)


def test_a_fresh_sweep_fits_the_schema(validator: Any) -> None:
    validator.validate(synthetic_report())


def test_unknown_keys_survive_and_bad_data_is_named() -> None:
    data = synthetic_report()
    newer = copy.deepcopy(data)
    newer["from_the_future"] = {"x": 1}
    newer["trials"][0]["new_measure"] = 2.5
    assert as_sweep(newer).to_dict() == newer
    broken = copy.deepcopy(data)
    broken["trials"][1]["status"] = "exploded"
    with pytest.raises(DecodeError, match=r"trial 2: 'status' is not one of ok"):
        SweepReport.from_dict(broken)


def test_renderers_take_the_typed_model() -> None:
    data = pinned("gpu_infer_budget")
    model = SweepReport.from_dict(data)
    assert sweep_terminal.to_text(model, width=160) == sweep_terminal.to_text(data, width=160)
    assert sweep_html.render(model) == (GOLDEN / "gpu_infer_budget.sweep.html").read_text(encoding="utf-8")


def test_fit_checked_sizes_are_told_apart_from_timed_ones(validator: Any) -> None:
    """The edge search's fit checks (a few untimed steps) next to the sizes timed in full:
    the JSON says which is which (fit_probe, fit_check), the table too, and it fits the schema."""
    import dataclasses

    from gpudoctor.reports.sweep_view import trial_rows
    from gpudoctor.sweep.records import FitCheck, TrialSpec
    from gpudoctor.sweep.report import build_sweep_report
    from gpudoctor.sweep.search import SearchPlan, run_search

    from .test_edge_search import low_line_gpu

    gpu = low_line_gpu("saturating")

    def check(size: int) -> Any:
        result = gpu.probe(size)
        return dataclasses.replace(result, fit_check=FitCheck(3, False, True, "cuDNN autotuning off for this check"))

    plan = SearchPlan(max_batch=4096)
    outcome = run_search(plan, gpu.full, probe_runner=check)
    spec = TrialSpec(target="t.py:build", mode="train", batch_size=1, device="cuda")
    report = build_sweep_report(target="t.py:build", spec=spec, plan=plan, outcome=outcome, headroom=0.1,
                                command=["gpudoctor", "sweep", "t.py:build", "--mode", "train"], duration_s=1.0)
    data = report.to_dict()
    validator.validate(data)
    assert SweepReport.from_dict(data).to_dict() == data
    timed = [t["batch_size"] for t in data["trials"] if "fit_check" not in t and t["status"] == "ok"]
    checked = [t["batch_size"] for t in data["trials"] if t.get("fit_check")]
    assert timed == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert checked == [1472, 1544, 1632, 1680, 1728]  # 1728 ran out of memory in its check
    first = next(t for t in data["trials"] if t.get("fit_check"))
    assert first["fit_probe"] is True and first["fit_check"]["steps"] == 3
    assert first["fit_check"]["cudnn_benchmark"] is False and first["fit_check"]["cudnn_benchmark_target"] is True
    search = data["search"]
    assert (search["sizes_measured"], search["sizes_probed"], search["sizes_failed"]) == (10, 4, 1)
    assert search["edge_bound"] == 1912 and search["prediction_low"] is True
    notes = {row["batch"]: row["notes"] for row in trial_rows(report)}
    assert "fit check: memory only (3 steps, not timed, cuDNN autotuning off)" in notes["1472"]
    assert "fit check" not in notes["512"]
    older = synthetic_report()  # a report without the new fields still loads
    assert "edge_bound" not in older["search"] and all("fit_check" not in t for t in older["trials"])
