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
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.base.fsutil import write_atomic
from gpudoctor.reports import formats as report_formats

log = logging.getLogger(__name__)

DEFAULT_DIR = "gpudoctor-reports"
DEFAULT_FORMATS = report_formats.DEFAULT_FILE_FORMATS
MAX_SUFFIX_TRIES = 1000


def _known_suffixes() -> list[str]:
    """Every report set's suffix (the format registry's), longest first, so "x.session.json"
    is recognised before "x.json"."""
    return sorted(set(report_formats.suffixes()) | {".xml", ".htm"}, key=len, reverse=True)


@dataclass(frozen=True)
class OutputPaths:
    """The files one run will write; all but `json_copy` share `directory` and `stem`."""

    directory: Path
    stem: str  # file name without suffix, e.g. "train-20250101-120000"
    formats: tuple[str, ...]  # report formats to write (html, json, markdown, junit)
    force: bool = False  # overwrite existing files (only with --force)
    with_session: bool = True  # the Session beside the report, for `gpudoctor report`
    with_trace: bool = True  # room for the profiler's gzip Chrome trace (the caller may fill it)
    json_copy: Path | None = None  # `--json PATH`: one more copy of the JSON report

    def kinds(self) -> list[str]:
        kinds = list(self.formats)
        if self.with_session:
            kinds.append("session")
        if self.with_trace:
            kinds.append("trace")
        return kinds

    def path(self, kind: str) -> Path:
        return self.directory / f"{self.stem}{report_formats.suffix(kind)}"

    def all(self) -> dict[str, Path]:
        """kind -> path for every planned file (the `--json` copy under "json_copy")."""
        paths = {kind: self.path(kind) for kind in self.kinds()}
        if self.json_copy is not None:
            paths["json_copy"] = self.json_copy
        return paths

    def relative_names(self) -> dict[str, str]:
        """kind -> file name, for report["files"]: the set sits together, so names
        relative to the report stay right when the folder is moved or attached."""
        return {kind: p.name for kind, p in self.all().items() if kind != "json_copy"}

    @property
    def html(self) -> Path | None:
        return self.path("html") if "html" in self.formats else None

    @property
    def json(self) -> Path | None:
        return self.path("json") if "json" in self.formats else None

    @property
    def session(self) -> Path | None:
        return self.path("session") if self.with_session else None

    @property
    def trace(self) -> Path | None:
        return self.path("trace") if self.with_trace else None


def shown(path: Path | str) -> str:
    """A path for the terminal: relative to the working directory when inside it."""
    try:
        relative = os.path.relpath(path)
    except (OSError, ValueError):  # the working directory is gone, or another drive
        return str(path)
    return str(path) if relative.startswith(os.pardir) else relative


def safe_stem(name: str) -> str:
    """A file-name-safe stem from a script or module name ("train.py" -> "train")."""
    base = os.path.basename(str(name).rstrip("/\\")) or "run"
    for suffix in (".py", ".sh"):
        base = base.removesuffix(suffix)
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._-")
    return cleaned[:60] or "run"


def plan_outputs(
    out: str | None,
    stem: str,
    now: datetime,
    formats: Iterable[str] = DEFAULT_FORMATS,
    *,
    force: bool = False,
    json_path: str | None = None,
    session: bool = True,
    trace: bool = True,
) -> OutputPaths:
    """Resolve `--out` and check it, before anything runs.

    out=None: ./gpudoctor-reports/<stem>-<YYYYmmdd-HHMMSS>.*; out an existing directory
    (or ending with a slash): the default names inside it; otherwise out is a file
    stem, with or without a report suffix (`run1`, `run1.html`, `out/run1.json`).
    `json_path` (`--json PATH`) adds one more copy of the JSON report there.
    Raises GpudoctorError(CANNOT_WRITE) when the directory cannot be created or
    written, GpudoctorError(OUTPUT_EXISTS) when a target exists and not force.
    """
    fmts = tuple(dict.fromkeys(formats))
    unknown = [f for f in fmts if f not in report_formats.FORMATS or not report_formats.FORMATS[f].is_file]
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
        for suffix in _known_suffixes():
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                break
        directory = target.parent
    paths = OutputPaths(
        directory=directory,
        stem=name,
        formats=fmts,
        force=force,
        with_session=session,
        with_trace=trace,
        json_copy=Path(json_path) if json_path else None,
    )
    ensure_writable(directory)
    if paths.json_copy is not None:
        if paths.json_copy.is_dir() or json_path.endswith(("/", os.sep)):  # type: ignore[union-attr]
            raise GpudoctorError(f"--json {json_path}: expected a file path, not a directory", exitcodes.USAGE)
        ensure_writable(paths.json_copy.parent)
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
        raise GpudoctorError(
            f"cannot write reports to {directory}: it exists and is not a directory", exitcodes.CANNOT_WRITE
        ) from None
    except OSError as exc:
        raise GpudoctorError(
            f"cannot create the report directory {directory}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE
        ) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".gpudoctor-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise GpudoctorError(
            f"cannot write reports to {directory}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE
        ) from None


def _free_paths(paths: OutputPaths, start: int = 0) -> tuple[OutputPaths, int]:
    """The planned stem if all its names are free, else the first free `-N` stem
    (N >= start), with N."""
    if paths.force:
        return paths, 0
    for n in range(start, MAX_SUFFIX_TRIES):
        candidate = paths if n == 0 else replace(paths, stem=f"{paths.stem}-{n}")
        siblings = [p for kind, p in candidate.all().items() if kind != "json_copy"]
        if not any(os.path.lexists(p) for p in siblings):
            return candidate, n
    raise GpudoctorError(f"no free report name near {paths.path(paths.kinds()[0])}", exitcodes.OUTPUT_EXISTS)


@dataclass(frozen=True)
class WrittenOutputs:
    """What write_outputs did. Iterating yields the paths written (for "wrote X" lines)."""

    paths: OutputPaths  # as used: the stem may carry a `-N` suffix
    report: dict[str, Any]  # the report as written, report["files"] naming its siblings
    files: dict[str, Path]  # kind -> path, every file of the set (the caller's trace too)

    def __iter__(self) -> Iterator[Path]:
        return iter(self.files.values())


def write_outputs(
    paths: OutputPaths,
    report: Mapping[str, Any],
    session_dict: Mapping[str, Any] | None,
    *,
    trace_bytes: bytes | None = None,
    fail_on: str | None = None,
    render: Callable[[Mapping[str, Any], str], str] | None = None,
    render_ahead: Callable[[Mapping[str, Any], str], bool] | None = None,
) -> WrittenOutputs:
    """Write the report in every planned format, the session, and the trace.

    `render_ahead(report, fmt)`, called for every format before any is rendered, may begin
    rendering one elsewhere (analyze's helper process: True) for `render` to take, last.

    The trace is written from `trace_bytes`, or kept if the caller already wrote it
    at `paths.trace`. report["files"] is set to the sibling names (relative, so the
    set can be moved or attached together). Never overwrites unless paths.force; a
    name taken since planning moves the set to the next free `-N` stem.
    """
    renderer = render or _default_renderer(fail_on)
    try:
        paths.directory.mkdir(parents=True, exist_ok=True)  # removed during the run?
    except OSError as exc:
        raise GpudoctorError(
            f"cannot create the report directory {paths.directory}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE
        ) from None
    kept_trace = paths.trace if paths.trace is not None and trace_bytes is None and paths.trace.is_file() else None
    if trace_bytes is None:
        paths = replace(paths, with_trace=False)  # nothing of ours to write (maybe the caller's)
    if session_dict is None:
        paths = replace(paths, with_session=False)
    planned_stem = paths.stem
    start = 0
    while start < MAX_SUFFIX_TRIES:
        final, n = _free_paths(paths, start)
        written_report = dict(report)
        written_report["files"] = _names(final, kept_trace)
        session_out = session_dict
        if trace_bytes is not None and final.stem != planned_stem:
            # the profile names its trace file; the set moved to a new stem, so must it
            written_report, session_out = _retarget_trace(
                written_report, session_dict, paths.path("trace").name, final.path("trace").name
            )
        blobs, failed = _render_all(final, written_report, session_out, trace_bytes, renderer, render_ahead)
        if failed:
            # keep what rendered (the session above all: `gpudoctor report` can redo
            # the rest later) and name only the files that exist
            paths = replace(paths, formats=tuple(f for f in paths.formats if f not in failed))
            final = replace(final, formats=paths.formats)
            written_report["files"] = _names(final, kept_trace)
            blobs, _ = _render_all(final, written_report, session_out, trace_bytes, renderer, render_ahead)
        done: list[Path] = []
        try:
            for kind, data in blobs.items():
                target = final.path(kind)
                write_atomic(target, data, exclusive=not final.force)
                done.append(target)
                _share(target)
        except FileExistsError:
            # a name was taken meanwhile (another run finishing in the same second):
            # remove this attempt's files, all ours, and take the next free stem
            for p in done:
                _unlink_quietly(p)
            start = n + 1
            continue
        except OSError as exc:
            for p in done:
                _unlink_quietly(p)
            raise GpudoctorError(
                f"cannot write {final.directory}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE
            ) from None
        files = {kind: final.path(kind) for kind in blobs}
        if kept_trace is not None:
            files["trace"] = kept_trace
        if final.json_copy is not None:
            data = blobs.get("json") or _encode(renderer(written_report, "json"))
            files["json_copy"] = write_json_copy(final.json_copy, data, final.force)
        return WrittenOutputs(paths=final, report=written_report, files=files)
    raise GpudoctorError(f"no free report name in {paths.directory}", exitcodes.OUTPUT_EXISTS)


def _retarget_trace(
    report: dict[str, Any], session_dict: Mapping[str, Any] | None, old: str, new: str
) -> tuple[dict[str, Any], Mapping[str, Any] | None]:
    """Copies of the report and session whose profile.trace_file says `new` where it said `old`."""

    def moved(holder: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        if holder is None:
            return None
        profile = holder.get("profile")
        if not isinstance(profile, Mapping) or profile.get("trace_file") != old:
            return holder
        return {**holder, "profile": {**profile, "trace_file": new}}

    evidence = report.get("evidence")
    if isinstance(evidence, Mapping):
        report = {**report, "evidence": moved(evidence)}
    return report, moved(session_dict)


def _names(paths: OutputPaths, kept_trace: Path | None) -> dict[str, str]:
    names = paths.relative_names()
    if kept_trace is not None:
        names["trace"] = kept_trace.name
    return names


def write_json_copy(path: Path, data: bytes, force: bool) -> Path:
    """The `--json PATH` copy: the user's own name, or `name-N.json` if it got taken."""
    stem, suffix = (path.name[: -len(".json")], ".json") if path.name.endswith(".json") else (path.name, "")
    for n in range(MAX_SUFFIX_TRIES):
        target = path if n == 0 else path.with_name(f"{stem}-{n}{suffix}")
        try:
            write_atomic(target, data, exclusive=not force)
            _share(target)
            return target
        except FileExistsError:
            continue
        except OSError as exc:
            raise GpudoctorError(f"cannot write {target}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE) from None
    raise GpudoctorError(f"no free name near {path}", exitcodes.OUTPUT_EXISTS)


def _default_renderer(fail_on: str | None) -> Callable[[Mapping[str, Any], str], str]:
    # imported late: the renderers pull in matplotlib
    from gpudoctor import reports

    return lambda report, fmt: reports.render(report, fmt, fail_on=fail_on)


def _render_all(
    paths: OutputPaths,
    report: Mapping[str, Any],
    session_dict: Mapping[str, Any] | None,
    trace_bytes: bytes | None,
    render: Callable[[Mapping[str, Any], str], str],
    ahead: Callable[[Mapping[str, Any], str], bool] | None = None,
) -> tuple[dict[str, bytes], list[str]]:
    """Everything rendered before the first byte is written. A renderer that fails
    costs its own file only (logged), never the rest of a long run's diagnosis.

    `ahead(report, fmt)`: True when it began rendering `fmt` elsewhere; those are taken
    (`render`) once everything else is made here."""
    begun = {fmt for fmt in paths.formats if ahead is not None and ahead(report, fmt)}
    made: dict[str, bytes] = {}
    failed: list[str] = []

    def rendered(fmt: str) -> None:
        try:
            made[fmt] = _encode(render(report, fmt))
        except Exception as exc:
            log.warning(
                "could not render the %s report: %s: %s",
                fmt,
                type(exc).__name__,
                exc,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            failed.append(fmt)

    for fmt in paths.formats:
        if fmt not in begun:
            rendered(fmt)
    session = None
    if paths.with_session and session_dict is not None:
        # compact: the session is for machines (`gpudoctor report`), and long runs are big
        session = _encode(json.dumps(session_dict, separators=(",", ":"), allow_nan=False))
    for fmt in paths.formats:
        if fmt in begun:
            rendered(fmt)
    blobs = {fmt: made[fmt] for fmt in paths.formats if fmt in made}
    if session is not None:
        blobs["session"] = session
    if paths.with_trace and trace_bytes is not None:
        blobs["trace"] = trace_bytes
    return blobs, failed


def _encode(text: str) -> bytes:
    """UTF-8, whatever the text holds: a non-UTF-8 path or argument decodes to lone
    surrogates (os.fsdecode), which UTF-8 cannot carry; they are written as the
    escape `\\udcff` (still valid JSON: it reads back as the same string)."""
    return text.encode("utf-8", "backslashreplace")


def _share(path: Path) -> None:
    """Give a report the permissions of any file the user creates (the temporary file
    behind the atomic write is private, 0600): reports are meant to be shared."""
    try:
        os.chmod(path, 0o666 & ~_umask())
    except OSError:
        pass


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask would, for all threads)
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
