"""Renderers: each takes the finished, typed report (gpudoctor.verdict.report_model.Report) and
returns text; the report's JSON dict is accepted too, and decoded first.

They never see the engine or the Session object, only the report. Formatters are
chosen by name (`--format html|json|markdown|junit|terminal`), the way bandit picks
its formatters; the names, suffixes and renderers are registered once, in
reports/formats.py. Each renderer lives in its own module and is imported only when
used, so `--format json` never pays for matplotlib.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from gpudoctor.reports.formats import FORMATS, PLAIN, Renderer, RenderOptions, diff_renderer, renderer

if TYPE_CHECKING:
    from gpudoctor.diff.diff_model import Diff
    from gpudoctor.verdict.report_model import Report

__all__ = ["FORMATS", "PLAIN", "RenderOptions", "Renderer", "render", "render_diff", "renderer", "show", "show_diff"]


def render(report: Report | Mapping[str, Any], fmt: str, *, fail_on: str | None = None) -> str:
    """Render the report in one format. `fail_on` matters to junit only (which
    findings count as failures); the others show every finding. A dict that does not
    fit the report model raises jsonmodel.DecodeError (a ValueError, one line)."""
    # not at import: `gpudoctor checks` reaches this package for reports.console alone
    from gpudoctor.verdict.report_model import as_report

    fn = renderer(fmt)
    return fn(as_report(report), RenderOptions(fail_on=fail_on) if fail_on is not None else PLAIN)


def render_diff(diff: Diff | Mapping[str, Any], fmt: str) -> str:
    """Render a before/after comparison (schema gpudoctor.diff/1) in one format."""
    from gpudoctor.diff.diff_model import as_diff

    return diff_renderer(fmt)(as_diff(diff))


def show(report: Report | Mapping[str, Any], fmt: str, stream: TextIO, *, fail_on: str | None = None,
         text: Callable[[Mapping[str, Any], str], str] | None = None) -> None:
    """A report as a command's output in one format: shown (terminal: styled at a terminal), or its
    text (`text`: another way to render it, e.g. analyze's helper process, which knows fail_on)."""
    from gpudoctor.reports.formats import shower

    show_fn = shower(fmt)
    if show_fn is not None:
        from gpudoctor.verdict.report_model import as_report

        show_fn(as_report(report), stream)
    elif text is not None:
        stream.write(text(report if isinstance(report, Mapping) else report.to_dict(), fmt))
    else:
        stream.write(render(report, fmt, fail_on=fail_on))


def show_diff(diff: Diff | Mapping[str, Any], fmt: str, stream: TextIO) -> None:
    """A comparison as `gpudoctor diff`'s output in one format: shown (terminal), or its text."""
    from gpudoctor.diff.diff_model import as_diff
    from gpudoctor.reports.formats import diff_shower

    show_fn = diff_shower(fmt)
    if show_fn is not None:
        show_fn(as_diff(diff), stream)
    else:
        stream.write(render_diff(diff, fmt))
