"""A renderer in its own process, made ready while this one works.

The HTML report's charts need matplotlib, whose import alone takes about a third of a
second. `gpudoctor analyze` of a long trace spends seconds decoding it on one core; a
process forked first imports the renderers on another core meanwhile, then renders the
finished report when asked (the report travels as a dict, the text comes back). When the
process cannot start or dies, rendering happens here as it always did: the same code, the
same text.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpudoctor.forking import pipe, spare_core, start_child

log = logging.getLogger(__name__)


class RenderWorker:
    """Renders `formats` in a forked process; anything else, and any failure, renders here."""

    def __init__(self, formats: tuple[str, ...], fail_on: str | None) -> None:
        self.formats = formats
        self.fail_on = fail_on
        self._conn: Any = None
        self._process: Any = None

    @classmethod
    def start(cls, formats: tuple[str, ...], fail_on: str | None = None) -> RenderWorker:
        worker = cls(formats, fail_on)
        if not formats or not spare_core():
            return worker
        try:
            ours, theirs = pipe(duplex=True)
            worker._process = start_child(_serve, (theirs, formats, fail_on), "gpudoctor-render")
            theirs.close()
            worker._conn = ours
        except (OSError, ValueError) as exc:
            log.debug("rendering in this process: %s", exc)
        return worker

    def render(self, report: Mapping[str, Any], fmt: str) -> str:
        if self._conn is not None and fmt in self.formats:
            try:
                self._conn.send((dict(report), fmt))
                status, text = self._conn.recv()
                if status == "ok":
                    return text  # type: ignore[no-any-return]
                raise RuntimeError(text)  # the renderer's own error, as it would have been raised here
            except (EOFError, OSError) as exc:  # the process died: render here
                log.debug("render process lost: %s", exc)
                self.close()
        from gpudoctor import reports

        return reports.render(report, fmt, fail_on=self.fail_on)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, ValueError):
                pass
            self._conn.close()
            self._conn = None
        if self._process is not None:
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
            self._process = None

    def __enter__(self) -> RenderWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(conn: Any, formats: tuple[str, ...], fail_on: str | None) -> None:
    from gpudoctor import reports

    for fmt in formats:
        reports.renderer(fmt)  # the imports, while the parent decodes
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        report, fmt = request
        try:
            conn.send(("ok", reports.render(report, fmt, fail_on=fail_on)))
        except Exception as exc:  # noqa: BLE001  # the caller logs it and keeps the other files
            conn.send(("error", f"{type(exc).__name__}: {exc}"))

