"""Where the workload writes: recorded only in `diagnose --try` runs (config "record_writes").

`--try` runs the workload again once per remedy; those runs must leave the user's files as
the diagnosed run left them, so they run in a scratch working directory. Whether that
contains them depends on where the script writes: a path relative to its working
directory lands in the scratch directory, an absolute path (``Path(__file__).parent /
"ckpt.pt"``) does not. An audit hook (PEP 578) sees every file a Python process opens for
writing, renames, removes or creates, with the path as the program gave it; the supervisor
reads these ("write" events) and decides. The hook only compares the event's name for the
hundreds of other audit events, and records each path once (at most MAX_PATHS).

In a trial (config "protect_writes": the user's working directory) the hook also refuses,
with PermissionError, a write that would land in the user's directory (its real path under
it, through a link of the scratch directory or an absolute path): the trial fails saying
which file, and the file stays as the diagnosed run left it.
"""

import os
import sys

# Loaded at start-up (of --try runs): annotations name builtins or are strings (agent/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypedDict

    from . import Agent

    # what an audit event gives as a path (an open() of a descriptor gives the int)
    _Path = str | bytes | os.PathLike[str] | os.PathLike[bytes] | int

    class _State(TypedDict):
        seen: set[str]  # the absolute paths recorded
        busy: bool  # the hook runs: what it opens itself is not the workload's
        full: bool  # MAX_PATHS recorded: no more

MAX_PATHS = 500
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_PATH_EVENTS = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.truncate": 1, "shutil.rmtree": 1,
                "os.rename": 2, "os.link": 2, "os.symlink": 2}


def install(agent: "Agent", protect: "str | None" = None) -> None:
    """Start recording (and, in a trial, protecting `protect`); never raises otherwise."""
    state: _State = {"seen": set(), "busy": False, "full": False}
    # the agent's own files (its event file, profiler traces): never recorded, and never a reason
    # to emit from inside the event writer, which opens its file holding its lock
    own = tuple({os.path.join(agent.directory, ""), os.path.join(os.path.realpath(agent.directory), "")})
    protected = os.path.realpath(protect).rstrip(os.sep) + os.sep if protect else None
    # a place that holds the protected directory (its temporary directory is /tmp) allows nothing of it
    allowed = tuple(p for p in _allowed() if not protected.startswith(p)) if protected is not None else ()

    def hook(event, args):  # type: (str, tuple[Any, ...]) -> None
        if event != "open" and event not in _PATH_EVENTS:
            return
        if state["busy"]:
            return
        state["busy"] = True  # the agent's own event file is opened through here too
        blocked = None
        try:
            for path in _written(event, args):
                if isinstance(path, str) and path.startswith(own):
                    continue
                if protected is not None and blocked is None:
                    blocked = _blocked(path, protected, allowed)
                if not state["full"]:
                    _record(agent, state, path)
        except Exception:  # noqa: BLE001 (the workload's open() must never fail because of gpudoctor)
            pass
        finally:
            state["busy"] = False
        if blocked is not None:
            raise PermissionError(13, "gpudoctor --try: a trial may not write into your working directory "
                                  "(it runs in a scratch copy)", blocked)

    try:
        sys.addaudithook(hook)
    except Exception as exc:  # noqa: BLE001
        agent.error("record_writes", exc)


def _written(event: str, args: "tuple[Any, ...]") -> "list[_Path]":
    if event == "open":
        path, mode, flags = (*tuple(args), None, None, None)[:3]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        return [path] if writing else []
    return list(args[: _PATH_EVENTS[event]])


def _allowed() -> "tuple[str, ...]":
    """Where a trial may write even inside the protected directory: its own scratch directory
    (where it starts), the temporary directory, the caches shared by design (~/.cache)."""
    import tempfile

    places = [tempfile.gettempdir(), os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")]
    try:
        places.insert(0, os.getcwd())
    except OSError:
        pass
    return tuple(os.path.realpath(p).rstrip(os.sep) + os.sep for p in places if p)


def _blocked(path: "_Path", protected: str, allowed: "tuple[str, ...]") -> "str | None":
    """The path when writing it would change a file of the protected directory, else None."""
    if isinstance(path, int):
        return None
    real = os.path.realpath(os.fspath(path))
    real = real.decode(errors="replace") if isinstance(real, bytes) else real
    if (real + os.sep).startswith(allowed):
        return None
    return real if (real + os.sep).startswith(protected) else None


def _record(agent: "Agent", state: "_State", path: "_Path") -> None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    elif hasattr(path, "__fspath__"):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        return  # a descriptor: opened (and recorded) by path before
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    absolute = os.path.normpath(os.path.join(cwd, path)) if cwd and not os.path.isabs(path) else path
    if absolute in state["seen"]:
        return
    state["seen"].add(absolute)
    if len(state["seen"]) > MAX_PATHS:
        state["full"] = True
        agent.emit("write", path=None, overflow=True)
        return
    agent.emit("write", path=absolute, relative=not os.path.isabs(path), cwd=cwd)
