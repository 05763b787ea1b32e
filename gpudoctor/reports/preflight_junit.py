"""The preflight checklist as JUnit XML: one test case per item, so CI lists failed
items by name. fail -> <failure>, not-checked -> <skipped> with the reason, warn ->
a passing case whose system-out starts with WARN. Built with xml.etree, so every
string from the machine is escaped by the serializer.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from .junit import _clean, close_suites


def render(report: Mapping[str, Any]) -> str:
    suites = ET.Element("testsuites", name="gpudoctor preflight")
    suite = ET.SubElement(suites, "testsuite", name="gpudoctor.preflight",
                          timestamp=_clean(report.get("created_at") or ""),
                          hostname=_clean((report.get("host") or {}).get("name") or ""))
    props = ET.SubElement(suite, "properties")
    policy = report.get("policy") or {}
    for name, value in (("verdict", report.get("verdict")), ("schema", report.get("schema")),
                        ("policy", policy.get("source") or "none")):
        ET.SubElement(props, "property", name=name, value=_clean("" if value is None else value))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for item in report.get("items") or []:
        counts["tests"] += 1
        case = ET.SubElement(suite, "testcase", classname=_clean(f"gpudoctor.preflight.{item.get('group')}"),
                             name=_clean(f"{item.get('id')} {item.get('slug')}: {item.get('title')}"), time="0")
        status = item.get("status")
        if status == "fail":
            counts["failures"] += 1
            failure = ET.SubElement(case, "failure", message=_clean(item.get("found") or ""), type="fail")
            failure.text = _clean(_describe(item))
        elif status == "not-checked":
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=_clean(item.get("reason") or "not checked"))
        else:
            out = ET.SubElement(case, "system-out")
            out.text = _clean(("WARN: " if status == "warn" else "") + _describe(item))
    return close_suites(suites, suite, counts, report.get("duration_s"))


def _describe(item: Mapping[str, Any]) -> str:
    lines = [f"Found: {item.get('found')}", f"Expected: {item.get('expected')}"]
    if item.get("note"):
        lines.append(f"Policy: {item['note']}")
    lines.append(f"Why: {item.get('why')}")
    lines.append(f"Fix: {item.get('fix')}")
    if item.get("fix_code"):
        lines.append(str(item["fix_code"]))
    lines.append(f"Source: {item.get('source')}")
    return "\n".join(lines)
