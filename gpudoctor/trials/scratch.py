"""Where `--try` runs its trials: a scratch working directory, so the user's files stay as the
diagnosed run left them.

The diagnosed run (the user's own) runs in the user's directory, with the agent recording
where each Python process writes (gpudoctor/agent/writes.py) and the directory's files
listed before and after (every process's writes there, a shell's `>> log` too). Each trial
then runs in a fresh scratch directory that mirrors the working directory: every entry is
a symbolic link to the user's, except along the paths the diagnosed run wrote, which are
real directories and copies (so a checkpoint is overwritten, a log appended to, in the
copy). Inputs stay reachable at the same relative paths.

What a scratch directory cannot contain: a write through an absolute path into the user's
files or anywhere else outside the temporary and cache directories (``Path(__file__).parent /
"ckpt.pt"`` resolves to the user's directory), or through a symbolic link that leads out.
Then `--try` is refused, unless `--try-in-place` says to run the trials in the working
directory anyway. After each trial the working directory is listed again: a change there
(a write the diagnosed run did not make) is named and stops the remaining trials.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpudoctor.collectors.events import WrittenPath

log = logging.getLogger(__name__)

MAX_LISTED = 20_000  # entries of the working directory compared before and after (then: Python writes only)
SHOWN = 3

Listing = dict[str, tuple[int, int]]  # relative path -> (mtime_ns, size)


def listing(root: str, skip: Iterable[str] = ()) -> tuple[Listing, bool]:
    """The files under `root` (symbolic links not followed), and whether all were listed."""
    skipped = {os.path.realpath(p) for p in skip}
    found: Listing = {}
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if len(found) >= MAX_LISTED:
                return found, False
            try:
                if entry.is_dir(follow_symlinks=False):
                    if os.path.realpath(entry.path) not in skipped:
                        pending.append(entry.path)
                    continue
                stat = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found[os.path.relpath(entry.path, root)] = (stat.st_mtime_ns, stat.st_size)
    return found, True


def changed(before: Listing, after: Listing) -> list[str]:
    return sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path))


@dataclass
class Workspace:
    """The working directory of the diagnosed run, and what that run wrote."""

    cwd: str
    inside: set[str] = field(default_factory=set)  # relative paths written inside it
    outside: list[str] = field(default_factory=list)  # writes a scratch directory cannot contain
    after: Listing = field(default_factory=dict)  # the directory's files as the run left them
    complete: bool = True  # every file was listed
    skip: tuple[str, ...] = ()  # gpudoctor's own report directory

    def refusal(self) -> str | None:
        """Why trials cannot run in a scratch directory, or None."""
        if not self.outside:
            return None
        shown = ", ".join(self.outside[:SHOWN]) + (f" and {len(self.outside) - SHOWN} more"
                                                   if len(self.outside) > SHOWN else "")
        return (f"--try refused: the run wrote where a scratch directory cannot contain it ({shown}); a trial "
                "would change those files. Pass --try-in-place to run the trials anyway (your files may change)")

    def make(self) -> Path:
        """A fresh scratch directory mirroring the working directory (the caller removes it)."""
        scratch = Path(tempfile.mkdtemp(prefix="gpudoctor-try-"))
        _mirror(Path(self.cwd), scratch, self.inside)
        return scratch

    def leaked(self) -> list[str]:
        """Files of the working directory that changed since the diagnosed run ended."""
        now, _ = listing(self.cwd, self.skip)
        return changed(self.after, now)


def before_run(cwd: str, skip: Sequence[str]) -> Listing:
    return listing(cwd, skip)[0]


def workspace(cwd: str, before: Listing, writes: Sequence[WrittenPath], skip: Sequence[str]) -> Workspace:
    """What the diagnosed run wrote, sorted into what a scratch directory contains and what not."""
    after, complete = listing(cwd, skip)
    space = Workspace(cwd=cwd, after=after, complete=complete, skip=tuple(skip))
    space.inside.update(changed(before, after))
    root = os.path.realpath(cwd)
    for write in writes:
        if write.path is None:
            space.outside.append("(more paths than recorded)")
            continue
        real = os.path.realpath(write.path)
        process_cwd = os.path.realpath(write.cwd) if write.cwd else None
        if _under(real, root) and process_cwd is not None and _under(process_cwd, root):
            # relative, or absolute from the working directory (logging's FileHandler): the trial's lands in
            # its scratch directory; one from elsewhere (__file__) is refused by the trial's agent
            space.inside.add(os.path.relpath(real, root))
        elif not _ignorable(write.path, skip):
            space.outside.append(write.path)
    space.outside = sorted(set(space.outside))
    return space


def _ignorable(path: str, skip: Sequence[str]) -> bool:
    """Temporary files, devices, caches shared by design, gpudoctor's own directories."""
    real = os.path.realpath(path)
    places = [tempfile.gettempdir(), "/dev", "/proc", os.environ.get("XDG_CACHE_HOME") or "~/.cache", *skip]
    return any(_under(real, os.path.realpath(os.path.expanduser(p))) for p in places)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _mirror(source: Path, target: Path, written: set[str]) -> None:
    """`target` holds a link to each entry of `source`, but real directories and copies along `written`."""
    below: dict[str, set[str]] = {}
    for path in written:
        head, _, rest = path.partition(os.sep)
        below.setdefault(head, set())
        if rest:
            below[head].add(rest)
    try:
        names = os.listdir(source)
    except OSError:
        names = []
    for name in sorted(set(names) | set(below)):
        original, copy = source / name, target / name
        if name not in below:
            os.symlink(original, copy)
        elif original.is_dir() and below[name]:
            copy.mkdir()
            _mirror(original, copy, below[name])
        elif original.is_file():
            shutil.copy2(original, copy)  # a written file: the trial changes the copy
        elif original.is_dir():
            shutil.copytree(original, copy, symlinks=True)  # a directory written as a whole (created, renamed)
        # else: written, then removed by the run: it starts absent, as the run left it
