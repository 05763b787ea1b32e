"""The published JSON Schemas of gpudoctor's documents, generated from the typed models.

``report-v1.schema.json`` describes schema ``gpudoctor.report/1`` (gpudoctor.verdict.report_model),
``diff-v1.schema.json`` schema ``gpudoctor.diff/1`` (gpudoctor.diff_model),
``sweep-v1.schema.json`` schema ``gpudoctor.sweep/1`` (gpudoctor.sweep.sweep_model).
The files are package data, so ``importlib.resources`` finds them in an installed
gpudoctor; scripts/write_schemas.py regenerates them and a test keeps them equal to
what the models say.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from typing import Any


def report_schema() -> dict[str, Any]:
    from gpudoctor.base import jsonmodel
    from gpudoctor.verdict.report_model import REPORT_SCHEMA, SCHEMA_ID, Report

    return jsonmodel.schema(
        Report, title=REPORT_SCHEMA, schema_id=SCHEMA_ID,
        description="The JSON report written by gpudoctor diagnose, analyze and report. Version 1: "
                    "fields are only ever added, so a consumer must accept keys it does not know.",
    )


def diff_schema() -> dict[str, Any]:
    from gpudoctor.base import jsonmodel
    from gpudoctor.diff.diff_model import DIFF_SCHEMA, Diff

    return jsonmodel.schema(
        Diff, title=DIFF_SCHEMA, schema_id="https://gpudoctor.dev/schemas/diff-v1.schema.json",
        description="The before/after comparison written by gpudoctor diff. Version 1: fields are only ever added.",
    )


def sweep_schema() -> dict[str, Any]:
    from gpudoctor.base import jsonmodel
    from gpudoctor.sweep.sweep_model import SCHEMA_ID, SWEEP_SCHEMA, SweepReport

    return jsonmodel.schema(
        SweepReport, title=SWEEP_SCHEMA, schema_id=SCHEMA_ID,
        description="The batch-size sweep written by gpudoctor sweep. Version 1: fields are only ever added, "
                    "so a consumer must accept keys it does not know.",
    )


# file name -> the function that generates it
GENERATED: dict[str, Callable[[], dict[str, Any]]] = {
    "report-v1.schema.json": report_schema,
    "diff-v1.schema.json": diff_schema,
    "sweep-v1.schema.json": sweep_schema,
}


def text(schema: dict[str, Any]) -> str:
    """The schema as committed: indented, keys in the models' order, one final newline."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def load(name: str) -> dict[str, Any]:
    """A published schema, as installed."""
    data: dict[str, Any] = json.loads(resources.files(__name__).joinpath(name).read_text(encoding="utf-8"))
    return data
