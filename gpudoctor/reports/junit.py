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

from gpudoctor.verdict.report_model import CheckRecord, Report, ReportFinding

from ._common import as_report, command_line, fails, key_numbers, stage_name
from .formats import PLAIN, RenderOptions

DEFAULT_FAIL_ON = "warning"
# XML 1.0 forbids most control characters even when escaped; exception text can hold them
# not allowed in XML 1.0, or (DEL, C1, bidi overrides) terminal controls when the file is printed
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ufffe\uffff]")


def _clean(text: Any) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


def render(report: Report | Mapping[str, Any], options: RenderOptions = PLAIN) -> str:
    """A formats.Renderer; `options.fail_on` is the --fail-on level: without one, warnings and worse fail."""
    report = as_report(report)
    level = options.fail_on or DEFAULT_FAIL_ON
    by_check: dict[str, list[ReportFinding]] = {}
    for finding in report.findings:
        by_check.setdefault(finding.id, []).append(finding)
    checks = list(report.checks)
    known = {c.id for c in checks}
    # findings of a check the outcomes do not list (e.g. a plugin) still get a case
    checks += [CheckRecord(id=cid, status="finding", title=fs[0].title)
               for cid, fs in by_check.items() if cid not in known]

    suites = ET.Element("testsuites", name="gpudoctor")
    suite = ET.SubElement(suites, "testsuite", name="gpudoctor", timestamp=_clean(report.started_at or ""))
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", report.summary.verdict),
        ("command", command_line(report)),
        ("workload_exit_code", report.exit_code),
        ("fail_on", level),
    ):
        ET.SubElement(props, "property", name=name, value=_clean("" if value is None else value))

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for check in checks:
        counts["tests"] += 1
        cid = check.id or "?"
        title = check.title or ""
        case = ET.SubElement(
            suite,
            "testcase",
            classname=_clean(f"gpudoctor.{stage_name(check.stage).replace(' ', '_')}"),
            name=_clean(f"{cid} {check.slug or ''}: {title}".replace("  ", " ").strip()),
            time="0",
        )
        findings = by_check.get(cid, [])
        if check.status == "skipped":
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=_clean(check.reason or "skipped"))
        elif check.status == "error":
            counts["errors"] += 1
            err = ET.SubElement(case, "error", message=_clean(check.reason or "check failed"), type="check-error")
            err.text = _clean(check.reason or "")
        elif findings:
            failing = [f for f in findings if fails(f, level)]
            if failing:
                counts["failures"] += 1
                worst = failing[0]
                failure = ET.SubElement(
                    case, "failure", message=_clean(worst.title or cid), type=_clean(worst.severity)
                )
                failure.text = _clean("\n\n".join(_describe(f) for f in failing))
            else:
                out = ET.SubElement(case, "system-out")
                out.text = _clean("\n\n".join(_describe(f) for f in findings))
    return close_suites(suites, suite, counts, report.duration_s)


def close_suites(suites: ET.Element, suite: ET.Element, counts: Mapping[str, int], duration_s: Any) -> str:
    """The counts on both elements, the suite's time, and the document."""
    for key, value in counts.items():
        suite.set(key, str(value))
        suites.set(key, str(value))
    suite.set("time", f"{float(duration_s or 0):.3f}")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _describe(finding: ReportFinding) -> str:
    lines = [f"[{finding.severity}] {finding.id}: {finding.title}"]
    if finding.consequence_of:
        lines.append(f"consequence of {finding.consequence_of}")
    lines.append(finding.message)
    numbers = key_numbers(finding, limit=6)
    if numbers:
        lines.append(numbers)
    remedy = finding.remedy
    if remedy is not None and remedy.text:
        lines.append("Remedy: " + remedy.text)
    if remedy is not None and remedy.code:
        lines.append(remedy.code)
    return "\n".join(lines)
