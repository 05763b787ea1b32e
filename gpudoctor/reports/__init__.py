"""Renderers: each takes the finished, typed report (gpudoctor.report_model.Report) and
returns text; the report's JSON dict is accepted too, and decoded first.

They never see the engine or the Session object, only the report. Formatters are
chosen by name (`--format html|json|markdown|junit|terminal`), the way bandit picks
its formatters; each lives in its own module and is imported only when used, so
`--format json` never pays for matplotlib.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpudoctor.diff_model import Diff
    from gpudoctor.report_model import Report

# name -> (module, file suffix)
FORMATS: dict[str, tuple[str, str]] = {
    "html": ("html", ".html"),
    "json": ("json_report", ".json"),
    "markdown": ("markdown", ".md"),
    "junit": ("junit", ".junit.xml"),
    "terminal": ("terminal", ".txt"),
}
FILE_FORMATS = ("html", "json", "markdown", "junit")


def suffix(fmt: str) -> str:
    return FORMATS[fmt][1]


def renderer(fmt: str) -> Callable[..., str]:
    """The text renderer for a format name (ValueError for an unknown one)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r} (choose from {', '.join(FORMATS)})")
    module = importlib.import_module(f"{__name__}.{FORMATS[fmt][0]}")
    if fmt == "terminal":
        return module.to_text  # type: ignore[no-any-return]
    return module.render  # type: ignore[no-any-return]


def render(report: Report | Mapping[str, Any], fmt: str, *, fail_on: str | None = None) -> str:
    """Render the report in one format. `fail_on` matters to junit only (which
    findings count as failures); the others show every finding. A dict that does not
    fit the report model raises jsonmodel.DecodeError (a ValueError, one line)."""
    # not at import: `gpudoctor checks` reaches this package for reports.console alone
    from gpudoctor.report_model import as_report

    fn = renderer(fmt)
    report = as_report(report)
    if fmt == "junit":
        return fn(report, fail_on=fail_on)
    return fn(report)


DIFF_FORMATS = ("terminal", "json", "html", "markdown")


def render_diff(diff: Diff | Mapping[str, Any], fmt: str) -> str:
    """Render a before/after comparison (schema gpudoctor.diff/1) in one format."""
    from gpudoctor.diff_model import as_diff

    diff = as_diff(diff)
    if fmt == "html":
        from .diff_html import render as html

        return html(diff)
    from . import diff_text

    if fmt == "json":
        return diff_text.render_json(diff)
    if fmt == "markdown":
        return diff_text.render_markdown(diff)
    if fmt == "terminal":
        return diff_text.to_text(diff)
    raise ValueError(f"unknown diff format {fmt!r} (choose from {', '.join(DIFF_FORMATS)})")
