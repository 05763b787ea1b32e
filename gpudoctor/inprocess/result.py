"""`Report`: the report of a watch (or of attach), a small typed view over the JSON report dict.

It is the same dict the JSON report holds (schema gpudoctor.report/1): index it like
one (``report["summary"]["verdict"]``), or use the properties. In Jupyter it displays
itself inline: ``_repr_html_`` returns the self-contained HTML report inside an
``<iframe srcdoc>``, so the report's Content-Security-Policy and styles stay inside
the frame and neither leak into the notebook nor are changed by it.
"""

from __future__ import annotations

import html
import importlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoctor.reports.formats import DEFAULT_FILE_FORMATS
from gpudoctor.session import Session

if TYPE_CHECKING:
    from gpudoctor.verdict.output import OutputPaths

log = logging.getLogger(__name__)

IFRAME_HEIGHT_PX = 720


class Report(Mapping[str, Any]):
    def __init__(self, data: Mapping[str, Any], *, session: Session | None = None,
                 files: Mapping[str, Path] | None = None, trace_bytes: bytes | None = None,
                 result: Any = None) -> None:
        self.data: dict[str, Any] = dict(data)
        self.session = session  # what was measured (None when built from a saved report)
        self.files: dict[str, Path] = dict(files or {})  # kind -> path of the files written
        self.trace_bytes = trace_bytes  # the gzip profiler trace, kept for save()
        self.result = result  # diagnose_fn: what the function returned (its last call)

    # -- the dict --------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    # -- typed access ------------------------------------------------------------
    @property
    def verdict(self) -> str:
        """The report's verdict, for Python: the skipped checks are in `report.checks`, not
        "below" as in the terminal summary and the HTML."""
        verdict = str((self.data.get("summary") or {}).get("verdict") or "")
        return verdict.replace("see why below", "see why in report.checks")

    @property
    def summary(self) -> dict[str, Any]:
        return dict(self.data.get("summary") or {})

    @property
    def findings(self) -> list[dict[str, Any]]:
        """Most important first, as in every report."""
        return list(self.data.get("findings") or [])

    @property
    def checks(self) -> list[dict[str, Any]]:
        """Every check's outcome: pass | finding | skipped | error, with the reason."""
        return list(self.data.get("checks") or [])

    @property
    def ids(self) -> list[str]:
        """The IDs of the findings, in order (e.g. ["GD102", "GD101"])."""
        return [str(f.get("id")) for f in self.findings]

    def finding(self, key: str) -> dict[str, Any] | None:
        """A finding by check ID (GD102) or slug (input-stall), or None."""
        wanted = key.strip().lower()
        for f in self.findings:
            if str(f.get("id", "")).lower() == wanted or str(f.get("slug") or "").lower() == wanted:
                return f
        return None

    # -- renderings ----------------------------------------------------------------
    def render(self, fmt: str) -> str:
        """The report in one format: html | json | markdown | junit | terminal (reports/formats.py)."""
        reports = importlib.import_module("gpudoctor.reports")
        return str(reports.render(self.data, fmt))

    def html(self) -> str:
        return self.render("html")

    def to_json(self) -> str:
        return self.render("json")

    def text(self) -> str:
        """The terminal summary as plain text."""
        return self.render("terminal")

    def save(self, out: str | None = None, *, formats: tuple[str, ...] = DEFAULT_FILE_FORMATS,
             name: str = "watch", force: bool = False) -> dict[str, Path]:
        """Write the report set (HTML, JSON, the Session, the trace) like diagnose does;
        kind -> path. `out`: a directory or a file stem (default ./gpudoctor-reports/)."""
        from gpudoctor.verdict.judge import WritePlan, write

        if self.session is None:
            raise ValueError("this report has no Session to save beside it")
        written = write(self.data, WritePlan(_plan(out, name, formats, force), session=self.session,
                                             trace=self.trace_bytes, elsewhere=True))
        files = dict(written.files)
        self.data = written.report
        self.files.update(files)
        return files

    # -- display -----------------------------------------------------------------
    def _repr_html_(self) -> str:
        try:
            page = self.html()
        except Exception as exc:  # noqa: BLE001  (a display must never raise into the notebook)
            return f"<pre>gpudoctor: the HTML report could not be rendered: {html.escape(repr(exc))}</pre>"
        return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
                f'title="gpudoctor report" style="width:100%;height:{IFRAME_HEIGHT_PX}px;'
                'border:1px solid #ccc;border-radius:4px"></iframe>')

    def __repr__(self) -> str:
        count = len(self.findings)
        return f"<gpudoctor Report: {self.verdict} ({count} finding{'s' if count != 1 else ''})>"

    def __str__(self) -> str:
        try:
            return self.text()
        except Exception:  # noqa: BLE001 (str() must not raise)
            return repr(self)


def _plan(out: str | None, name: str, formats: tuple[str, ...], force: bool) -> OutputPaths:
    """Where save() writes: `out` is a directory or a file stem (None: ./gpudoctor-reports/<name>-<time>);
    one that cannot be written falls back to ./gpudoctor-reports (logged). A name that is taken moves
    the set to `-N` rather than failing, unless `force` overwrites it."""
    import dataclasses
    import datetime

    from gpudoctor.base import exitcodes
    from gpudoctor.base.exitcodes import GpudoctorError
    from gpudoctor.reports.formats import with_defaults
    from gpudoctor.verdict.output import DEFAULT_DIR, plan_outputs

    fmts = with_defaults(formats)
    # force=True only skips plan_outputs' "already exists" refusal: the write itself never
    # overwrites unless asked, and moves to a free -N name instead
    try:
        plan = plan_outputs(out, name, datetime.datetime.now(), fmts, force=True)
    except GpudoctorError as exc:
        if exc.code != exitcodes.CANNOT_WRITE or out is None:
            raise
        log.warning("gpudoctor: %s; writing the report to %s instead", exc, DEFAULT_DIR)
        plan = plan_outputs(None, name, datetime.datetime.now(), fmts, force=True)
    return dataclasses.replace(plan, force=force)
