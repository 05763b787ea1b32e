"""What a watch shows while it runs: one line, updated from the watch's ticker thread.

- In Jupyter (an IPython kernel is running): an output line below the cell, updated in
  place through an IPython display handle ("gpudoctor: 12 s, 340 steps, data wait 62%,
  GPU util 17%"); at the end it says where the report went.
- In a terminal (stderr is a TTY): the status line on the terminal's last row that
  `diagnose` shows, in a scroll region, so the program's own output is never overwritten.
- Elsewhere (a pipe, a log file, a batch job): nothing.

By default (`progress=None`) only the notebook line is shown: a program of one's own
in a terminal may draw its own bars (tqdm); `progress=True` adds the terminal line,
`progress=False` shows nothing. A display that fails is switched off and never raises.
"""

from __future__ import annotations

import html
import logging
import sys
from typing import Any

from gpudoctor.inprocess.recorder import Progress

log = logging.getLogger(__name__)


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython is only looked at when already imported)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 (IPython's shell lookup failing: not a notebook)
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def describe(progress: Progress) -> str:
    parts = [f"{progress.elapsed_s:.0f} s", f"{progress.steps} steps"]
    if progress.data_wait_share is not None:
        parts.append(f"data wait {progress.data_wait_share:.0%}")
    if progress.gpu_util_percent is not None:
        parts.append(f"GPU util {progress.gpu_util_percent:.0f}%")
    return "gpudoctor watching: " + ", ".join(parts)


class ProgressDisplay:
    """No display (the base class): every method does nothing."""

    def start(self) -> None:
        pass

    def update(self, progress: Progress) -> None:
        pass

    def stop(self, final: str | None = None) -> None:
        pass


class _Line:
    """A display object: HTML for notebook front ends, text for the others."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_html_(self) -> str:
        return f'<pre style="margin:0">{html.escape(self.text)}</pre>'

    def __repr__(self) -> str:
        return self.text


class NotebookProgress(ProgressDisplay):
    def __init__(self) -> None:
        self.handle: Any = None

    def start(self) -> None:
        try:
            from IPython.display import display

            self.handle = display(_Line("gpudoctor watching: starting"), display_id=True)
        except Exception as exc:  # noqa: BLE001 (a display must never raise into the notebook)
            log.debug("notebook progress: %s", exc)
            self.handle = None

    def update(self, progress: Progress) -> None:
        self._show(describe(progress))

    def stop(self, final: str | None = None) -> None:
        if final:
            self._show(final)
        self.handle = None

    def _show(self, text: str) -> None:
        if self.handle is None:
            return
        try:
            self.handle.update(_Line(text))
        except Exception as exc:  # noqa: BLE001 (a display must never raise into the notebook)
            log.debug("notebook progress: %s", exc)
            self.handle = None


class TerminalProgress(ProgressDisplay):
    def __init__(self) -> None:
        from gpudoctor.run.status import StatusLine

        self.line = StatusLine(enabled=None)

    def start(self) -> None:
        self.line.start()

    def update(self, progress: Progress) -> None:
        self.line.update(elapsed=progress.elapsed_s, steps=progress.steps, data_wait=progress.data_wait_share,
                         gpu_util=progress.gpu_util_percent)

    def stop(self, final: str | None = None) -> None:
        self.line.stop()
        if final:
            try:
                print(final, file=sys.stderr, flush=True)
            except (OSError, ValueError, AttributeError):
                pass


def make_progress(wanted: bool | None) -> ProgressDisplay:
    if wanted is False:
        return ProgressDisplay()
    if in_notebook():
        return NotebookProgress()
    if wanted is None:
        return ProgressDisplay()
    try:
        terminal = TerminalProgress()
    except Exception:  # noqa: BLE001 (no terminal progress, never a failed watch)
        return ProgressDisplay()
    return terminal if terminal.line.enabled else ProgressDisplay()
