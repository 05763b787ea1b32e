"""The one registry of report formats: the CLI's `--format` choices, the files' suffixes and
the renderers all derive from FORMATS.

A format is a name, a renderer and (for a file format) a suffix. Renderers are named as
"module:function" paths and imported only when used, so building the CLI or writing
`--format json` never pays for matplotlib; this module imports nothing heavy.

Every renderer has one shape (`Renderer`): the finished Report and the RenderOptions in,
the text out. A format reads the options it needs (junit: `fail_on`) and ignores the
rest. One typed exception: a format whose `suffix` is None is never written to a file
(`terminal`: the summary). It still renders as text (`--format terminal` into a pipe);
when it is a command's output, its `show` function (a `Shower`) writes it to the stream,
styled at a terminal (reports.show).
CONTRIBUTING.md ("Adding a report format") walks through adding one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:
    from gpudoctor.diff.diff_model import Diff
    from gpudoctor.verdict.report_model import Report


@dataclass(frozen=True)
class RenderOptions:
    """What a renderer may be told besides the report."""

    fail_on: str | None = None  # junit: the severity from which a finding is a failure (None: its default)


PLAIN = RenderOptions()


class Renderer(Protocol):
    """Report -> the text of one format (a file's content, or what goes to stdout)."""

    def __call__(self, report: Report, options: RenderOptions = PLAIN, /) -> str: ...


class Shower(Protocol):
    """Shows a report on a stream (styled when the stream is a terminal, plain elsewhere)."""

    def __call__(self, report: Report, stream: TextIO, /) -> None: ...


class DiffShower(Protocol):
    def __call__(self, diff: Diff, stream: TextIO, /) -> None: ...


class DiffRenderer(Protocol):
    """A before/after comparison (schema gpudoctor.diff/1) -> the text of one format."""

    def __call__(self, diff: Diff, /) -> str: ...


@dataclass(frozen=True)
class ReportFormat:
    """One `--format` choice."""

    name: str  # the --format value, and the kind under which its file is listed (report["files"])
    # a renderer is given by its "module:function" path (imported when first used), or is the function itself
    renderer: str | Renderer  # renders a report
    suffix: str | None  # the file's suffix (".junit.xml"); None: never a file, shown on a stream (terminal)
    diff_renderer: str | DiffRenderer | None = None  # renders `gpudoctor diff`'s comparison; None: reports only
    # a format that is not a file: how a command shows it on stdout/stderr (None: the rendered text)
    show: str | Shower | None = None
    diff_show: str | DiffShower | None = None

    @property
    def is_file(self) -> bool:
        return self.suffix is not None


# In the order error messages list them, and --help within the shown and the file formats (choices).
# Adding a format: one entry here (and its module).
FORMATS: dict[str, ReportFormat] = {
    fmt.name: fmt
    for fmt in (
        ReportFormat("html", "gpudoctor.reports.html:render", ".html", "gpudoctor.reports.diff_html:render"),
        ReportFormat("json", "gpudoctor.reports.json_report:render", ".json",
                     "gpudoctor.reports.diff_text:render_json"),
        ReportFormat("markdown", "gpudoctor.reports.markdown:render", ".md",
                     "gpudoctor.reports.diff_text:render_markdown"),
        ReportFormat("junit", "gpudoctor.reports.junit:render", ".junit.xml"),
        ReportFormat("terminal", "gpudoctor.reports.terminal:to_text", None, "gpudoctor.reports.diff_text:to_text",
                     show="gpudoctor.reports.terminal:show_summary", diff_show="gpudoctor.reports.diff_text:show_diff"),
    )
}
# written by every command that writes files, whatever --format adds
DEFAULT_FILE_FORMATS = ("html", "json")
# files beside a report that are not renderings of it: the Session and the profiler trace
ARTIFACT_SUFFIXES: Mapping[str, str] = {"session": ".session.json", "trace": ".trace.json.gz"}


def get(name: str) -> ReportFormat:
    """The format of this name (ValueError for an unknown one)."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown report format {name!r} (choose from {', '.join(FORMATS)})") from None


def choices(*, files_only: bool = False, diff: bool = False) -> tuple[str, ...]:
    """The --format choices: every format, only those written to files, or those a diff renders.
    The formats that are only shown (terminal: what a command prints by default) come first, then
    the files, each in the order of FORMATS: every command lists its choices alike."""
    wanted = [f for f in FORMATS.values()
              if (f.is_file or not files_only) and (f.diff_renderer is not None or not diff)]
    return tuple(f.name for f in sorted(wanted, key=lambda f: f.is_file))  # stable: FORMATS' order within each


def file_formats(names: list[str] | tuple[str, ...]) -> list[str]:
    """The names among `names` that are written to files (terminal is shown, not written)."""
    return [n for n in names if n in FORMATS and FORMATS[n].is_file]


def is_file_format(name: str) -> bool:
    """Whether the format is written to files (ValueError for an unknown one)."""
    return get(name).is_file


def with_defaults(extra: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The default files (HTML and JSON) first, then the other formats asked for, once each."""
    return tuple(dict.fromkeys([*DEFAULT_FILE_FORMATS, *extra]))


def suffix(kind: str) -> str:
    """The file suffix of a format or of an artifact (session, trace); KeyError otherwise."""
    if kind in ARTIFACT_SUFFIXES:
        return ARTIFACT_SUFFIXES[kind]
    fmt = FORMATS.get(kind)
    if fmt is None or fmt.suffix is None:
        raise KeyError(kind)
    return fmt.suffix


def suffixes() -> list[str]:
    """Every suffix a file of a report set can have."""
    return [*(f.suffix for f in FORMATS.values() if f.suffix is not None), *ARTIFACT_SUFFIXES.values()]


def renderer(name: str) -> Renderer:
    """The renderer of a format, imported now (ValueError for an unknown format)."""
    return _resolve(get(name).renderer)  # type: ignore[no-any-return]


def diff_renderer(name: str) -> DiffRenderer:
    """The diff renderer of a format (ValueError when the format renders no diff)."""
    fmt = FORMATS.get(name)
    if fmt is None or fmt.diff_renderer is None:
        raise ValueError(f"unknown diff format {name!r} (choose from {', '.join(choices(diff=True))})")
    return _resolve(fmt.diff_renderer)  # type: ignore[no-any-return]


def shower(name: str) -> Shower | None:
    """How a format is shown on a stream, when not by its text (terminal: the styled summary)."""
    ref = get(name).show
    return None if ref is None else _resolve(ref)


def diff_shower(name: str) -> DiffShower | None:
    ref = get(name).diff_show
    return None if ref is None else _resolve(ref)


def _resolve(ref: str | Callable[..., Any]) -> Any:
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
