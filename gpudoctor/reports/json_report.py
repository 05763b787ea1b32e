"""The JSON report: the machine-readable contract (schema gpudoctor.report/1).

Written from the typed report (gpudoctor.verdict.report_model), so what is written is what the
published schema (gpudoctor/schemas/report-v1.schema.json) describes. The contract keys
come first and in the documented order; every other key the report builder added follows
unchanged (fields are only ever added, never removed). Findings keep the engine's order:
most important first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gpudoctor.agent.redact import redact_argv
from gpudoctor.base.jsonmodel import nulled_non_finite, plain_numbers
from gpudoctor.reports.formats import PLAIN, RenderOptions
from gpudoctor.verdict.report_model import Report, as_report

CONTRACT_KEYS = (
    "schema",
    "tool",
    "command",
    "exit_code",
    "duration_s",
    "environment",
    "summary",
    "findings",
    "checks",
)
FINDING_KEYS = ("id", "stage", "severity", "title", "message", "evidence", "remedy", "estimated_gain")


def ordered(report: Mapping[str, Any]) -> dict[str, Any]:
    """The report with contract keys first (all present), the rest after, as given."""
    out: dict[str, Any] = {}
    for key in CONTRACT_KEYS:
        out[key] = report.get(key)
    out["command"] = redact_argv([str(a) for a in report.get("command") or []])
    out["findings"] = [_finding(f) for f in report.get("findings") or []]
    out["checks"] = list(report.get("checks") or [])
    for key, value in report.items():
        if key not in out:
            out[key] = value
    return out


def _finding(finding: Mapping[str, Any]) -> dict[str, Any]:
    out = {key: finding.get(key) for key in FINDING_KEYS}
    out.update({k: v for k, v in finding.items() if k not in out})
    return out


def render(report: Report | Mapping[str, Any], options: RenderOptions = PLAIN, *, indent: int | None = 1) -> str:
    """The JSON report (a formats.Renderer; the options change nothing: it holds every finding)."""
    data = _finite(ordered(as_report(report).to_dict()))
    if indent is None:
        return escape_controls(json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                                          default=str)) + "\n"
    return escape_controls(dumps_readable(data, indent)) + "\n"


# json.dumps(ensure_ascii=False) escapes C0 controls but writes DEL, the C1 controls (0x9b
# is CSI on many terminals) and bidi overrides as they are; in JSON text they can only sit
# inside strings, so their \u escapes are the same data and safe to print or `cat`.
_RAW_CONTROLS = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    return _RAW_CONTROLS.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def dumps_readable(value: Any, indent: int = 1, level: int = 0) -> str:
    """Indented JSON whose lists of plain numbers/strings stay on one line: a
    600-point timeline is one line, not 600, and the structure stays readable."""
    pad, inner = " " * (indent * level), " " * (indent * (level + 1))
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(str(k), ensure_ascii=False)}: {dumps_readable(v, indent, level + 1)}"
                 for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and not plain_numbers(value) \
            and any(isinstance(v, (dict, list)) for v in value):
        items = [inner + dumps_readable(v, indent, level + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False, allow_nan=False, default=str)


_finite = nulled_non_finite  # NaN and infinity are not JSON: an unmeasurable number becomes null
