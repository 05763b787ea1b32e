"""Fault injection: run the real `gpudoctor` CLI (or the Supervisor in-process) on small
workloads that fail in the ways real training runs fail, and on bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

WORKLOADS = Path(__file__).resolve().parent / "workloads"
GPUDOCTOR = [sys.executable, "-m", "gpudoctor"]


def _own_code_dirs() -> tuple[str, ...]:
    """Where gpudoctor's own code is installed (the package, its checks and reports).
    Not the clone's directory name: a clone called `gpudoctor` holds the workloads too."""
    import gpudoctor
    import gpudoctor.checks
    import gpudoctor.reports

    return tuple(
        str(Path(m.__file__).resolve().parent) + os.sep for m in (gpudoctor, gpudoctor.checks, gpudoctor.reports)
    )


# A DataLoader worker formats its error's traceback as text before the main process sees it,
# so the agent's fetch wrapper (which calls the real fetch) stays in that text: the
# workload's error passing through, not a crash of ours. Main-process tracebacks have no
# frame of the agent's wrappers (its excepthook drops them).
_PASS_THROUGH = ("agent" + os.sep + "torch_hooks.py",)




def own_frames(stderr: str) -> list[str]:
    """Traceback frames in gpudoctor's own code (a crash of ours), from `File "..."` lines."""
    frames = []
    for match in re.finditer(r'^\s*File "([^"]+)"', stderr, re.MULTILINE):
        path = match.group(1)
        if path.startswith(_own_code_dirs()) and not path.endswith(_PASS_THROUGH):
            frames.append(path)
    return frames


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    def reports(self) -> list[Path]:
        return sorted(p for p in self.out.glob("*.json") if not p.name.endswith(".session.json"))

    @property
    def report(self) -> dict[str, Any]:
        reports = self.reports()
        assert len(reports) == 1, f"expected one JSON report in {self.out}: {reports}\n{self.stderr}"
        return json.loads(reports[0].read_text())

    @property
    def session(self) -> dict[str, Any]:
        [path] = self.out.glob("*.session.json")
        return json.loads(path.read_text())

    def finding(self, check_id: str) -> dict[str, Any] | None:
        return next((f for f in self.report["findings"] if f["id"] == check_id), None)

    def status_lines(self) -> list[str]:
        """gpudoctor's own lines (its summary is off: --quiet)."""
        return [line for line in self.stderr.splitlines() if line.startswith("gpudoctor:")]

    def ended(self) -> list[str]:
        """The line that says how the workload ended."""
        return [line for line in self.status_lines() if line.endswith("; writing the report")]

    def assert_saved(self) -> None:
        """The one clear line, no traceback of ours, and the whole report set on disk."""
        ended = self.ended()
        assert len(ended) == 1, self.stderr
        assert "internal error" not in self.stderr, self.stderr
        assert not own_frames(self.stderr), self.stderr
        stem = self.reports()[0].name[: -len(".json")] if self.reports() else None
        assert stem, f"no report in {self.out}: {self.stderr}"
        for suffix in (".json", ".html", ".session.json"):
            assert (self.out / f"{stem}{suffix}").is_file(), (suffix, list(self.out.iterdir()))


def run_gpudoctor(args: list[str | bytes], out: Path, *, cwd: Path | None = None, env: dict | None = None,
                  timeout: float = 120, stderr: Any = subprocess.PIPE) -> Run:
    """`gpudoctor diagnose --quiet --out OUT/ ARGS...`; bytes arguments pass as they are
    (non-UTF-8 paths)."""
    command = [*GPUDOCTOR, "diagnose", "--quiet", "--out", f"{out}/", *args]
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("PYTHONFAULTHANDLER", None)
    proc = subprocess.run([os.fsencode(a) for a in command], stdout=subprocess.PIPE, stderr=stderr, cwd=cwd,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=full_env, check=False)
    return Run(proc.returncode, _text(proc.stdout), _text(proc.stderr), out)


class Started:
    """`gpudoctor diagnose --quiet --out OUT/ ARGS...` running in the background, so a test
    can act on what the workload says it did (a line on its stdout), not on a clock."""

    def __init__(self, args: list[str], out: Path, *, env: dict | None = None) -> None:
        command = [*GPUDOCTOR, "diagnose", "--quiet", "--out", f"{out}/", *args]
        full_env = dict(os.environ, **(env or {}))
        full_env.pop("PYTHONFAULTHANDLER", None)
        self.out = out
        self.lines: list[str] = []
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     env=full_env)

    def wait_for_line(self, text: str, timeout: float = 120) -> None:
        """Block until the workload prints a line containing `text` on its stdout."""
        import selectors

        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self.proc.kill()
                    raise AssertionError(f"no line with {text!r} within {timeout}s: {self.lines}")
                line = self.proc.stdout.readline()
                if not line:
                    raise AssertionError(f"the workload ended before printing {text!r}: {self.finish().stderr}")
                self.lines.append(_text(line))

    def finish(self, timeout: float = 120) -> Run:
        try:
            stdout, stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return Run(self.proc.returncode, "".join(self.lines) + _text(stdout), _text(stderr), self.out)


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


@pytest.fixture
def gd_started(tmp_path):
    def start(*args: str, **kwargs: Any) -> Started:
        return Started(list(args), tmp_path / "reports", **kwargs)

    return start


@pytest.fixture
def gd(tmp_path):
    def run(*args: str | bytes, **kwargs: Any) -> Run:
        return run_gpudoctor(list(args), tmp_path / "reports", **kwargs)

    return run


def main(*args: str) -> subprocess.CompletedProcess:
    """`gpudoctor ARGS` in this process (fast); what `cli` returns. For input that cannot
    hang: anything that might is run with `cli`, under a timeout."""
    import contextlib
    import io

    from gpudoctor.cli import main as gpudoctor_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = gpudoctor_main(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue().encode(), err.getvalue().encode())


def cli(*args: str | bytes, timeout: float = 60, cwd: Path | None = None, stdin: Any = subprocess.DEVNULL,
        env: dict | None = None) -> subprocess.CompletedProcess:
    """Any gpudoctor command, in a subprocess, with a timeout: bad input must never hang."""
    return subprocess.run([os.fsencode(a) for a in (*GPUDOCTOR, *args)], capture_output=True, timeout=timeout,
                          cwd=cwd, stdin=stdin, check=False, env=dict(os.environ, **(env or {})))
