"""Work beside the main process: the cores this process may use, and a forked helper.

`gpudoctor analyze` of a long trace forks one helper (gpudoctor.run.analyze_helper) before decoding
it, while the process is small: the helper replays the window and renders the HTML while
this process decodes the trace and computes the statistics.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def spare_core() -> bool:
    """Whether a forked helper would run beside this process rather than take turns with it."""
    return hasattr(os, "fork") and usable_cores() > 1


def start_child(target: Callable[..., None], args: tuple[Any, ...], name: str) -> Any:
    """A daemon child running `target(*args)`, forked (no pickling of `args`); raises OSError
    or ValueError when it cannot start."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for stream in (sys.stdout, sys.stderr):  # nothing buffered here may be written twice
        stream.flush()
    child = context.Process(target=target, args=args, daemon=True, name=name)
    child.start()
    return child


def pipe(duplex: bool) -> tuple[Any, Any]:
    import multiprocessing

    return multiprocessing.get_context("fork").Pipe(duplex=duplex)
