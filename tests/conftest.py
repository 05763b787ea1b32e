"""Shared pytest setup.

pytest puts this directory on sys.path (rootdir conftest, no __init__.py), so test
modules anywhere under tests/ can `from helpers import make_session, ...`.

Two kinds of tests (pyproject.toml registers the markers):
- fast unit tests, unmarked: in-process only; `make test-fast` runs them;
- `integration` tests: they start a process (the gpudoctor CLI, a workload, a DataLoader
  worker, a pip build); `make test-integration` runs them.
A test that is not marked `integration` and starts a process fails: the fixture below
refuses the start and names the test, so the fast suite stays fast and in-process.
"""

from __future__ import annotations

import multiprocessing.util
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

# Every way a test (or the code it calls) starts a process: subprocess and os.popen go
# through Popen._execute_child; multiprocessing's fork and spawn contexts (DataLoader
# workers) through os.fork and util.spawnv_passfds; pty through os.forkpty.
_PROCESS_STARTERS: list[tuple[Any, str]] = [
    (subprocess.Popen, "_execute_child"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
    (multiprocessing.util, "spawnv_passfds"),
]


# platform.uname() runs `uname -p` once per process and caches it; gpudoctor's host facts read
# it (preflight, the environment), so a fast test that happened to be the first to ask would
# start that process, and pass or fail by test order. Asked once here, before any test.
platform.platform()  # uname() and its lazily read processor field, both cached

# the HTML templates' compiled code is cached under $XDG_CACHE_HOME (gpudoctor/reports/template_cache.py):
# the tests' cache goes to a directory of their own, never the user's
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="gpudoctor-tests-cache-")

# matplotlib builds its font list on first use, running `fc-list` where its cache (in the directory
# above, new each run) has none: the first fast test to draw a chart would start that process, and
# pass or fail by test order. Built once here, before any test.
try:
    import matplotlib.font_manager  # noqa: F401  (the import builds the font list)
except ImportError:  # the charts are optional where matplotlib is not installed
    pass


class UnmarkedProcessStart(RuntimeError):
    """A fast (unmarked) test tried to start a process."""


def _refusing(name: str, started: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        started.append(name)
        raise UnmarkedProcessStart(f"{name}() in a test not marked `integration`")

    return refuse


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("integration") is not None:
        yield
        return
    started: list[str] = []
    originals = [(owner, name, getattr(owner, name)) for owner, name in _PROCESS_STARTERS if hasattr(owner, name)]
    for owner, name, _ in originals:
        setattr(owner, name, _refusing(name, started))
    try:
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    if started:
        pytest.fail(f"{request.node.nodeid} starts a process ({started[0]}) but is not marked "
                    "`integration` (pytestmark = pytest.mark.integration, or @pytest.mark.integration)",
                    pytrace=False)


# Property tests draw the same examples on every run (a red CI run is then a code change, not
# a lucky draw); HYPOTHESIS_PROFILE=search draws fresh ones for a longer hunt.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("search", max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
