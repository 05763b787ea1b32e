"""The before/after comparison as one self-contained HTML page.

Same rules as the report page (reports.html): jinja2 autoescaping, inline styles
and SVG, a Content-Security-Policy that forbids every network request, and only
the hashed copy/print script may run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from gpudoctor.diff.diff_model import Diff

from . import charts
from ._common import argv_line, format_number
from .diff_text import change_text, printable_diff, sample_text
from .html import SCRIPT, _chart, content_security_policy, environment


def render(diff: Diff | Mapping[str, Any]) -> str:
    diff = printable_diff(diff)  # no terminal controls, even in a page
    metrics = [
        {"label": m.label, "verdict": m.verdict, "before_text": format_number(m.before, m.unit),
         "after_text": format_number(m.after, m.unit), "change_text": change_text(m)}
        for m in diff.metrics
        if m.before is not None or m.after is not None
    ]
    sides = {side: {"info": info, "command_line": argv_line(list(info.command))}
             for side, info in (("before", diff.before), ("after", diff.after))}
    timelines = diff.timelines
    return environment().get_template("diff.html").render(
        csp=content_security_policy(),
        script=Markup(SCRIPT),
        diff=diff,
        verdict=diff.verdict,
        sides=sides,
        reasons=diff.comparable.reasons,
        forced=diff.comparable.forced,
        speedup=diff.speedup,
        samples=diff.samples,
        samples_text={"before": sample_text(diff.samples.before), "after": sample_text(diff.samples.after)},
        metrics=metrics,
        findings={group: diff.findings.group(group) for group in diff.findings.GROUPS},
        chart=_chart(lambda t: charts.diff_timeline(t.get("before"), t.get("after")), timelines),
    )
