"""Processes the command started that outlive it (a helper started with its own session,
a server it forked off): when the workload has ended, which of them still run.

gpudoctor leaves them running (a process the user started on purpose, such as a
TensorBoard server, must not die because it was diagnosed) and says so, with their pids
and command lines, on stderr and in the report, so that none lingers unnoticed.
"""

from __future__ import annotations

import os

import psutil

from gpudoctor.agent.redact import env_secrets, redact_argv

MAX_NAMED = 5


def still_running(seen: dict[int, float | None], started_after: float, exclude: set[int]) -> list[str]:
    """`pid (command line)` of each process in `seen` (pid -> create time, None when only
    the pid is known) that still runs: the same process (same create time, or created after
    `started_after` when the time was not recorded), not a zombie."""
    found = []
    for pid, created in sorted(seen.items()):
        if pid in exclude or pid == os.getpid():
            continue
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                same = proc.create_time() == created if created is not None else proc.create_time() >= started_after
                if not same or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                cmdline = proc.cmdline()
        except psutil.Error:
            continue
        shown = " ".join(redact_argv(cmdline, env_secrets(os.environ)))[:120] or "?"
        found.append(f"pid {pid} ({shown})")
    return found


def note(leftovers: list[str]) -> str:
    return (f"{len(leftovers)} process(es) the command started still ran after it ended; gpudoctor left "
            f"them running: {'; '.join(leftovers[:MAX_NAMED])}" + (" ..." if len(leftovers) > MAX_NAMED else ""))
