"""The command's process tree as the supervisor sees it while the command runs.

Two things gpudoctor must say about it, since nothing else would:
- Python processes that run without the agent (a launcher or the workload set PYTHONPATH
  from scratch, or ran python -I/-E/-S): their loaders, steps and errors cannot be in the
  report, so the report names them (command lines redacted: reports get attached to tickets).
- processes the command started that outlive it. Those still in the workload's process
  group are stopped by the supervisor as Ctrl-C at a terminal stops a job (SIGINT, then
  SIGTERM and SIGKILL after --grace); those that left the group (a helper in a session of
  its own, a server started with setsid) are left running (a process the user detached on
  purpose, such as a TensorBoard server, must not die because it was diagnosed) and named,
  with their pids, on stderr and in the report, so that none lingers unnoticed.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable, Mapping

import psutil

from gpudoctor.agent.redact import env_secrets, redact_argv
from gpudoctor.base.text import one_line

MAX_NAMED = 5
SHOWN_CHARS = 120


class TreeWatch:
    def __init__(self, workdir: str, site_dir: str) -> None:
        self.workdir = workdir
        self.site_dir = site_dir
        self.seen: dict[int, float] = {}  # every process seen in the tree -> its create time
        self.uninstrumented: dict[int, str] = {}  # pid -> "pid N (command): why"
        self._checked: set[int] = set()

    def scan(self, root_pid: int, instrumented: Container[int]) -> None:
        """Walk the tree under `root_pid` once: remember each process, and look at the
        environment of each Python process not known to run the agent."""
        try:
            root = psutil.Process(root_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for child in tree:
            pid = child.pid
            if pid not in self.seen:
                try:
                    self.seen[pid] = child.create_time()
                except psutil.Error:
                    pass
            if pid in self._checked or pid in instrumented:
                continue
            cmdline: list[str] = []
            try:
                cmdline = child.cmdline()
                names = {child.name(), os.path.basename(cmdline[0]) if cmdline else ""}
                if not any(n.startswith("python") for n in names):
                    continue  # a shell or launcher, maybe about to exec python: look again later
                self._checked.add(pid)
                environ = child.environ()
                why = agent_missing(environ, cmdline, self.workdir, self.site_dir) or \
                    other_user(child, self.workdir)  # an agent that cannot write its events
            except psutil.AccessDenied:
                environ, why = {}, other_user(child, self.workdir)
            except (psutil.Error, OSError):
                continue
            if why:
                self.uninstrumented[pid] = f"pid {pid} ({_shown(cmdline, environ)}): {why}"

    def still_running(self, instrumented: Iterable[int], started_after: float, exclude: set[int],
                      group: int | None = None) -> list[str]:
        """`pid (command line)` of each process seen (in the tree, or instrumented), or still
        in the workload's process `group`, that still runs: the same process (same create
        time, or created after `started_after` when only its pid is known), not a zombie.
        The group catches what lived too briefly in the tree to be seen there."""
        candidates: dict[int, float | None] = dict(self.seen)
        for pid in [*instrumented, *(process_group_members(group) if group is not None else [])]:
            candidates.setdefault(pid, None)
        found = []
        for pid, created in sorted(candidates.items()):
            if pid in exclude or pid == os.getpid():
                continue
            try:
                proc = psutil.Process(pid)
                with proc.oneshot():
                    ctime = proc.create_time()
                    if (ctime != created if created is not None else ctime < started_after) or \
                            proc.status() == psutil.STATUS_ZOMBIE:
                        continue
                    cmdline = proc.cmdline()
            except psutil.Error:
                continue
            found.append(f"pid {pid} ({_shown(cmdline, {})})")
        return found


def process_group_members(group: int) -> list[int]:
    found = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == group:
                found.append(pid)
        except OSError:
            continue
    return found


def leftover_note(leftovers: list[str]) -> str:
    return (f"{len(leftovers)} process(es) the command started still ran after it ended; gpudoctor left "
            f"them running: {'; '.join(leftovers[:MAX_NAMED])}" + (" ..." if len(leftovers) > MAX_NAMED else ""))


def none_instrumented(uninstrumented: Mapping[int, str]) -> str:
    """The note for a run where no Python process loaded the agent, with why, where known."""
    reasons = list(uninstrumented.values())
    return "no Python process of the command was instrumented" + (
        f": {'; '.join(reasons[:2])}" + (" ..." if len(reasons) > 2 else "") if reasons else "")


def agent_missing(environ: dict[str, str], cmdline: list[str], workdir: str, site_dir: str) -> str | None:
    """Why a Python process with this environment and command line cannot load the agent."""
    flags = [a for a in cmdline[1:3] if a.startswith("-") and not a.startswith("--")]
    if any(set(f[1:]) & {"I", "E", "S"} for f in flags if not f.startswith(("-c", "-m", "-W", "-X"))):
        return "started with python -I, -E or -S, which skip PYTHONPATH or site"
    if site_dir not in environ.get("PYTHONPATH", "").split(os.pathsep):
        return "its PYTHONPATH was set without gpudoctor's agent (the command replaced PYTHONPATH)"
    if environ.get("GPUDOCTOR_SESSION_DIR") != workdir:
        return "its environment was replaced (no GPUDOCTOR_SESSION_DIR)"
    return None


def other_user(process: psutil.Process, workdir: str) -> str | None:
    """Why a Python process of another user (sudo, su, runuser, gosu, a setuid launcher)
    has no agent, or one that cannot write its events: None for gpudoctor's own user, or a
    user who may write the session directory."""
    try:
        uid = process.uids().effective
        user = process.username()
    except (psutil.Error, OSError, KeyError):
        return None
    if uid == os.geteuid() or _writable_by(workdir, uid):
        return None
    return (f"it runs as another user ({user}, uid {uid}; gpudoctor runs as uid {os.geteuid()}), who cannot write "
            "gpudoctor's session directory (and switching user with sudo or su usually resets the environment "
            f"that carries the agent); run gpudoctor itself as {user} (sudo -u {user} gpudoctor diagnose ...)")


def _writable_by(directory: str, uid: int) -> bool:
    """May `uid` create files in `directory` (by its owner and mode; groups not resolved)?"""
    try:
        info = os.stat(directory)
    except OSError:
        return False
    return uid == 0 or (info.st_uid == uid and bool(info.st_mode & 0o200)) or bool(info.st_mode & 0o002)


def _shown(cmdline: list[str], environ: dict[str, str]) -> str:
    """A command line for a report and a line on stderr: secrets masked (theirs and ours),
    controls and newlines shown as escapes (an argument cannot forge a line), cut short."""
    return one_line(" ".join(redact_argv(cmdline, env_secrets({**os.environ, **environ}))))[:SHOWN_CHARS] or "?"
