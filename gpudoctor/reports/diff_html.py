"""The before/after comparison as one self-contained HTML page.

Same rules as the report page (reports.html): jinja2 autoescaping, inline styles
and SVG, a Content-Security-Policy that forbids every network request, and only
the hashed copy/print script may run.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from gpudoctor.agent.redact import redact_argv

from . import charts
from ._common import format_number
from .console import printable
from .diff_text import change_text, sample_text
from .html import SCRIPT, _chart, content_security_policy, environment


def render(diff: Mapping[str, Any]) -> str:
    diff = printable(diff)  # no terminal controls, even in a page
    timelines = diff.get("timelines") or {}
    metrics = [
        {**m, "before_text": format_number(m.get("before"), m.get("unit")), "after_text": format_number(m.get("after"), m.get("unit")), "change_text": change_text(m)}
        for m in diff.get("metrics") or []
        if m.get("before") is not None or m.get("after") is not None
    ]
    sides = {}
    for side in ("before", "after"):
        info = dict(diff.get(side) or {})
        info["command_line"] = shlex.join(redact_argv([str(a) for a in info.get("command") or []]))
        sides[side] = info
    return environment().get_template("diff.html").render(
        csp=content_security_policy(),
        script=Markup(SCRIPT),
        diff=diff,
        verdict=diff.get("verdict") or "",
        sides=sides,
        reasons=(diff.get("comparable") or {}).get("reasons") or [],
        forced=(diff.get("comparable") or {}).get("forced"),
        speedup=diff.get("speedup") or {},
        samples=diff.get("samples") or {},
        samples_text={side: sample_text((diff.get("samples") or {}).get(side)) for side in ("before", "after")},
        metrics=metrics,
        findings=diff.get("findings") or {},
        chart=_chart(lambda t: charts.diff_timeline(t.get("before"), t.get("after")), timelines),
    )
