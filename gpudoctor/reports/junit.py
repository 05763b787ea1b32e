"""JUnit XML, so CI systems show gpudoctor's checks like tests.

One testcase per check: a finding at or above the --fail-on level is a failure
(below it the case passes and carries the finding as system-out), a skipped check
is skipped with its reason, a check that crashed is an error. Built with
xml.etree so every string from the run is escaped by the serializer.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from ._common import command_line, fails, key_numbers, stage_name

DEFAULT_FAIL_ON = "warning"
# XML 1.0 forbids most control characters even when escaped; exception text can hold them
# not allowed in XML 1.0, or (DEL, C1, bidi overrides) terminal controls when the file is printed
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff]")


def _clean(text: Any) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


def render(report: Mapping[str, Any], *, fail_on: str | None = None) -> str:
    """`fail_on` is the --fail-on level; without one, warnings and worse fail."""
    level = fail_on or DEFAULT_FAIL_ON
    by_check: dict[str, list[Mapping[str, Any]]] = {}
    for finding in report.get("findings") or []:
        by_check.setdefault(str(finding.get("id")), []).append(finding)
    checks = list(report.get("checks") or [])
    known = {str(c.get("id")) for c in checks}
    # findings of a check the outcomes do not list (e.g. a plugin) still get a case
    checks += [{"id": cid, "status": "finding", "title": fs[0].get("title")} for cid, fs in by_check.items() if cid not in known]

    suites = ET.Element("testsuites", name="gpudoctor")
    suite = ET.SubElement(suites, "testsuite", name="gpudoctor", timestamp=_clean(report.get("started_at") or ""))
    props = ET.SubElement(suite, "properties")
    summary = report.get("summary") or {}
    for name, value in (
        ("verdict", summary.get("verdict")),
        ("command", command_line(report)),
        ("workload_exit_code", report.get("exit_code")),
        ("fail_on", level),
    ):
        ET.SubElement(props, "property", name=name, value=_clean("" if value is None else value))

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for check in checks:
        counts["tests"] += 1
        cid = str(check.get("id") or "?")
        title = check.get("title") or ""
        case = ET.SubElement(
            suite,
            "testcase",
            classname=_clean(f"gpudoctor.{stage_name(check.get('stage')).replace(' ', '_')}"),
            name=_clean(f"{cid} {check.get('slug') or ''}: {title}".replace("  ", " ").strip()),
            time="0",
        )
        status = check.get("status")
        findings = by_check.get(cid, [])
        if status == "skipped":
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=_clean(check.get("reason") or "skipped"))
        elif status == "error":
            counts["errors"] += 1
            err = ET.SubElement(case, "error", message=_clean(check.get("reason") or "check failed"), type="check-error")
            err.text = _clean(check.get("reason") or "")
        elif findings:
            failing = [f for f in findings if fails(f, level)]
            if failing:
                counts["failures"] += 1
                worst = failing[0]
                failure = ET.SubElement(
                    case, "failure", message=_clean(worst.get("title") or cid), type=_clean(worst.get("severity") or "")
                )
                failure.text = _clean("\n\n".join(_describe(f) for f in failing))
            else:
                out = ET.SubElement(case, "system-out")
                out.text = _clean("\n\n".join(_describe(f) for f in findings))
    return close_suites(suites, suite, counts, report.get("duration_s"))


def close_suites(suites: ET.Element, suite: ET.Element, counts: Mapping[str, int], duration_s: Any) -> str:
    """The counts on both elements, the suite's time, and the document."""
    for key, value in counts.items():
        suite.set(key, str(value))
        suites.set(key, str(value))
    suite.set("time", f"{float(duration_s or 0):.3f}")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _describe(finding: Mapping[str, Any]) -> str:
    lines = [f"[{finding.get('severity')}] {finding.get('id')}: {finding.get('title')}"]
    if finding.get("consequence_of"):
        lines.append(f"consequence of {finding['consequence_of']}")
    lines.append(str(finding.get("message") or ""))
    numbers = key_numbers(finding, limit=6)
    if numbers:
        lines.append(numbers)
    remedy = finding.get("remedy") or {}
    if remedy.get("text"):
        lines.append("Remedy: " + str(remedy["text"]))
    if remedy.get("code"):
        lines.append(str(remedy["code"]))
    return "\n".join(lines)
