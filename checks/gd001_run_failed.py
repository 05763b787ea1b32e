"""GD001 run-failed: the workload did not finish normally.

What it detects
    The command gpudoctor watched crashed with an uncaught exception, was killed by
    a signal (the kernel's OOM killer sends SIGKILL; a segfault is SIGSEGV), or
    exited with a non-zero code. Out-of-memory errors on the GPU are GD402's.

Why it matters
    Everything else in the report describes the part of the run that happened. A
    diagnosis of a run that died after 3 steps is a diagnosis of its start-up; fix
    the crash first, or read the other findings with that in mind.

How it is measured
    The supervisor keeps the workload's exit status (128+N when signal N killed
    it); the agent records uncaught exceptions (type, message, traceback, with
    secrets redacted) in every Python process, DataLoader workers included.
    A run that gpudoctor itself stopped (--duration, --steps, Ctrl-C) is not a
    failure.

What to do
    Read the traceback in the report (or above, in the terminal: the workload's
    stderr is untouched). Exit 137 with no traceback usually means the host's OOM
    killer: look at host memory (fewer DataLoader workers, smaller prefetch_factor,
    no dataset copies per worker).
"""

from __future__ import annotations

import signal

from gpudoctor.model import Check, Evidence, Finding, Remedy
from gpudoctor.session import Session

STOPPED_BY_REQUEST = {"duration", "steps", "interrupted", "terminated"}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run(session: Session) -> list[Finding]:
    crashes = [e for e in session.errors if e.kind == "exception"]
    code = session.exit_code
    if session.stop_reason in STOPPED_BY_REQUEST and not crashes:
        return []
    if crashes:
        first = crashes[0]
        message = f"The workload raised {first.type}: {first.message.splitlines()[0] if first.message else ''}"
        if len(crashes) > 1:
            message += f" ({len(crashes)} uncaught exceptions in all, across processes/threads)"
        message += f"; exit code {code}." if code is not None else "."
        return [Finding(
            severity="critical",
            title=f"The run crashed: {first.type}",
            message=message,
            evidence={
                "exception": Evidence(first.type, label="exception type"),
                "pid": Evidence(first.pid, label="process"),
                "at_s": Evidence(round(first.t, 2) if first.t is not None else None, "s", label="time into the run"),
                "exit_code": Evidence(code, label="exit code"),
            },
            remedy=Remedy("Fix the exception first; the traceback is in the report's evidence and in the "
                          "workload's own stderr."),
        )]
    if code is None or code == 0:
        return []
    if any(e.kind == "oom" for e in session.errors):
        return []  # GD402 tells this story with the memory numbers
    if code > 128:
        name = _signal_name(code - 128)
        hint = " SIGKILL with no traceback is what the kernel's out-of-memory killer sends." if code == 137 else ""
        return [Finding(
            severity="critical",
            title=f"The run was killed by {name}",
            message=f"The workload ended by {name} (exit code {code}) after {session.duration_s:.1f}s.{hint}",
            evidence={"exit_code": Evidence(code, label="exit code"), "signal": Evidence(name)},
            remedy=Remedy("Check host memory (dmesg | grep -i oom) and DataLoader worker memory; a segfault "
                          "(SIGSEGV) points at a native extension." if code in (137, 139) else
                          "Find out who sent the signal (scheduler time limit, OOM killer, a user)."),
        )]
    return [Finding(
        severity="warning",
        title=f"The run exited with code {code}",
        message=f"The workload exited with code {code} after {session.duration_s:.1f}s without an uncaught "
                "exception (sys.exit or a launcher's status).",
        evidence={"exit_code": Evidence(code, label="exit code")},
    )]


CHECK = Check(
    id="GD001",
    slug="run-failed",
    stage=0,
    title="The workload crashed, was killed or exited non-zero",
    run=run,
    doc=__doc__ or "",
)
