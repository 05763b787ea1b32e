"""Where reports go, decided before the workload starts and written without loss.

`plan_outputs` runs first: it resolves `--out`, creates the directory and proves it
writable, and refuses when a target already exists, all before a possibly long
run, so a typo costs seconds rather than an hour of measurements. `write_outputs`
runs last: each file is written atomically and exclusively; if a name was taken
while the workload ran, the whole set moves to a suffixed stem (`-1`, `-2`, ...)
instead of failing and losing the diagnosis.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from gpudoctor import exitcodes
from gpudoctor.exitcodes import GpudoctorError
from gpudoctor.fsutil import write_atomic

log = logging.getLogger(__name__)

DEFAULT_DIR = "gpudoctor-reports"
DEFAULT_FORMATS = ("html", "json")
SUFFIXES = {
    "html": ".html",
    "json": ".json",
    "markdown": ".md",
    "junit": ".junit.xml",
    "session": ".session.json",
    "trace": ".trace.json.gz",
}
# longest first, so "x.session.json" is recognised before "x.json"
_KNOWN_SUFFIXES = sorted(set(SUFFIXES.values()) | {".xml", ".htm"}, key=len, reverse=True)
MAX_SUFFIX_TRIES = 1000


@dataclass(frozen=True)
class OutputPaths:
    """The files one run will write; every path shares `directory` and `stem`."""

    directory: Path
    stem: str  # file name without suffix, e.g. "train-20250101-120000"
    formats: tuple[str, ...]  # report formats to write (html, json, markdown, junit)
    session: bool = True  # the Session beside the report, for `gpudoctor report`
    trace: bool = False  # the profiler's gzip Chrome trace
    force: bool = False  # overwrite existing files (only with --force)
    extra: dict[str, str] = field(default_factory=dict)  # kind -> suffix, e.g. future formats

    def kinds(self) -> list[str]:
        kinds = list(self.formats)
        if self.session:
            kinds.append("session")
        if self.trace:
            kinds.append("trace")
        return kinds + list(self.extra)

    def path(self, kind: str) -> Path:
        suffix = self.extra.get(kind) or SUFFIXES[kind]
        return self.directory / f"{self.stem}{suffix}"

    def all(self) -> dict[str, Path]:
        return {kind: self.path(kind) for kind in self.kinds()}

    @property
    def html(self) -> Path | None:
        return self.path("html") if "html" in self.formats else None

    @property
    def json(self) -> Path | None:
        return self.path("json") if "json" in self.formats else None


def safe_stem(name: str) -> str:
    """A file-name-safe stem from a script or module name ("train.py" -> "train")."""
    base = os.path.basename(str(name).rstrip("/\\")) or "run"
    for suffix in (".py", ".sh"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._-")
    return cleaned[:60] or "run"


def plan_outputs(
    out: str | None,
    stem: str,
    now: datetime,
    formats: Iterable[str] = DEFAULT_FORMATS,
    *,
    force: bool = False,
    session: bool = True,
    trace: bool = False,
) -> OutputPaths:
    """Resolve `--out` and check it, before anything runs.

    out=None: ./gpudoctor-reports/<stem>-<YYYYmmdd-HHMMSS>.*; out an existing directory
    (or ending with a slash): the default names inside it; otherwise out is a file
    stem, with or without a report suffix (`run1`, `run1.html`, `out/run1.json`).
    Raises GpudoctorError(CANNOT_WRITE) when the directory cannot be created or
    written, GpudoctorError(OUTPUT_EXISTS) when a target exists and not force.
    """
    fmts = tuple(dict.fromkeys(formats))
    unknown = [f for f in fmts if f not in SUFFIXES or f in ("session", "trace")]
    if unknown:
        raise GpudoctorError(f"unknown output format {unknown[0]!r}", exitcodes.USAGE)
    default_name = f"{safe_stem(stem)}-{now:%Y%m%d-%H%M%S}"
    if out is None or out == "":
        directory, name = Path(DEFAULT_DIR), default_name
    elif out.endswith(("/", os.sep)) or Path(out).is_dir():
        directory, name = Path(out), default_name
    else:
        target = Path(out)
        name = target.name
        for suffix in _KNOWN_SUFFIXES:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                break
        directory = target.parent
    paths = OutputPaths(directory=directory, stem=name, formats=fmts, session=session, trace=trace, force=force)
    ensure_writable(directory)
    if not force:
        taken = [p for p in paths.all().values() if os.path.lexists(p)]
        if taken:
            raise GpudoctorError(
                f"{taken[0]} already exists; nothing was overwritten (choose another --out, or --force)",
                exitcodes.OUTPUT_EXISTS,
            )
    return paths


def ensure_writable(directory: Path) -> None:
    """Create the directory and prove a file can be written there (a real probe:
    permission bits lie for root, read-only mounts and full disks)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise GpudoctorError(f"cannot write reports to {directory}: it exists and is not a directory", exitcodes.CANNOT_WRITE) from None
    except OSError as exc:
        raise GpudoctorError(f"cannot create the report directory {directory}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".gpudoctor-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise GpudoctorError(f"cannot write reports to {directory}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE) from None


def _free_paths(paths: OutputPaths, start: int = 0) -> tuple[OutputPaths, int]:
    """The planned stem if all its names are free, else the first free `-N` stem
    (N >= start), with N."""
    if paths.force:
        return paths, 0
    for n in range(start, MAX_SUFFIX_TRIES):
        candidate = paths if n == 0 else replace(paths, stem=f"{paths.stem}-{n}")
        if not any(os.path.lexists(p) for p in candidate.all().values()):
            return candidate, n
    raise GpudoctorError(f"no free report name near {paths.path(paths.kinds()[0])}", exitcodes.OUTPUT_EXISTS)


def write_outputs(
    paths: OutputPaths,
    report: Mapping[str, Any],
    session_dict: Mapping[str, Any] | None,
    *,
    trace_bytes: bytes | None = None,
    fail_on: str | None = None,
    render: Callable[[Mapping[str, Any], str], str] | None = None,
) -> tuple[OutputPaths, dict[str, Any]]:
    """Write the report in every planned format, the session and the trace.

    Returns the paths actually used (the stem may carry a `-N` suffix) and the report
    as written, with report["files"] naming its sibling files (relative names, so the
    set can be moved or attached together). Never overwrites unless paths.force.
    """
    renderer = render or _default_renderer(fail_on)
    try:
        paths.directory.mkdir(parents=True, exist_ok=True)  # removed during the run?
    except OSError as exc:
        raise GpudoctorError(f"cannot create the report directory {paths.directory}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE) from None
    if "trace" in paths.kinds() and trace_bytes is None:
        paths = replace(paths, trace=False)
    if "session" in paths.kinds() and session_dict is None:
        paths = replace(paths, session=False)
    start = 0
    while start < MAX_SUFFIX_TRIES:
        final, n = _free_paths(paths, start)
        written_report = dict(report)
        written_report["files"] = {kind: p.name for kind, p in final.all().items()}
        blobs, failed = _render_all(final, written_report, session_dict, trace_bytes, renderer)
        if failed:
            # keep what rendered (the session above all: `gpudoctor report` can redo
            # the rest later) and name only the files that exist
            paths = replace(paths, formats=tuple(f for f in paths.formats if f not in failed))
            final = replace(final, formats=paths.formats)
            written_report["files"] = {kind: p.name for kind, p in final.all().items()}
            blobs, _ = _render_all(final, written_report, session_dict, trace_bytes, renderer)
        done: list[Path] = []
        try:
            for kind, data in blobs.items():
                target = final.path(kind)
                write_atomic(target, data, exclusive=not final.force)
                done.append(target)
        except FileExistsError:
            # a name was taken meanwhile (another run finishing at the same second):
            # remove this attempt's files, all ours, and take the next free stem
            for p in done:
                _unlink_quietly(p)
            start = n + 1
            continue
        except OSError as exc:
            for p in done:
                _unlink_quietly(p)
            raise GpudoctorError(f"cannot write {final.directory}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE) from None
        return final, written_report
    raise GpudoctorError(f"no free report name in {paths.directory}", exitcodes.OUTPUT_EXISTS)


def _default_renderer(fail_on: str | None) -> Callable[[Mapping[str, Any], str], str]:
    from gpudoctor import reports  # imported late: the renderers pull in matplotlib

    return lambda report, fmt: reports.render(report, fmt, fail_on=fail_on)


def _render_all(
    paths: OutputPaths,
    report: Mapping[str, Any],
    session_dict: Mapping[str, Any] | None,
    trace_bytes: bytes | None,
    render: Callable[[Mapping[str, Any], str], str],
) -> tuple[dict[str, bytes], list[str]]:
    """Everything rendered before the first byte is written. A renderer that fails
    costs its own file only (logged), never the rest of a long run's diagnosis."""
    blobs: dict[str, bytes] = {}
    failed: list[str] = []
    for fmt in paths.formats:
        try:
            blobs[fmt] = render(report, fmt).encode("utf-8")
        except Exception as exc:
            log.warning("could not render the %s report: %s: %s", fmt, type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))
            failed.append(fmt)
    if paths.session and session_dict is not None:
        blobs["session"] = json.dumps(session_dict, indent=1, allow_nan=False).encode("utf-8")
    if paths.trace and trace_bytes is not None:
        blobs["trace"] = trace_bytes
    return blobs, failed


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
