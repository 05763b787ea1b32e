"""How the supervisor names processes of the command's tree (process_tree)."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import psutil

from gpudoctor.run import process_tree
from gpudoctor.run.process_tree import _shown, leftover_note


def test_a_command_line_cannot_forge_a_gpudoctor_line() -> None:
    """Issue 27, item 13: argv newlines and controls reached stderr raw in the "left running" line."""
    argv = ["python", "-c", "pass\ngpudoctor: all good, no findings\x1b[2K"]
    shown = _shown(argv, {})
    assert "\n" not in shown and "\x1b" not in shown
    assert "\\ngpudoctor: all good" in shown and "\\x1b[2K" in shown
    note = leftover_note([f"pid 7 ({shown})"])
    assert "\n" not in note


class _OtherUsersPython:
    """A Python process of another user, as psutil shows it to gpudoctor's user."""

    pid = 4321

    def children(self, recursive: bool = False) -> list[_OtherUsersPython]:
        return []

    def create_time(self) -> float:
        return 1.0

    def cmdline(self) -> list[str]:
        return ["python3", "train.py"]

    def name(self) -> str:
        return "python3"

    def environ(self) -> dict[str, str]:
        raise psutil.AccessDenied(self.pid)

    def uids(self) -> Any:
        return SimpleNamespace(real=os.geteuid() + 1, effective=os.geteuid() + 1, saved=os.geteuid() + 1)

    def username(self) -> str:
        return "trainer"


def test_a_process_of_another_user_says_why_it_has_no_agent(monkeypatch, tmp_path) -> None:
    """Issue 27, item 17: a workload that drops to another user got "no Python process ...
    was instrumented" without the reason."""
    monkeypatch.setattr(process_tree.psutil, "Process", lambda pid: _OtherUsersPython())
    session = tmp_path / "session"
    session.mkdir(mode=0o700)  # as gpudoctor makes it
    watch = process_tree.TreeWatch(str(session), "/site")
    watch.scan(4321, instrumented=())
    (why,) = watch.uninstrumented.values()
    assert why.startswith("pid 4321 (python3 train.py): it runs as another user (trainer")
    assert "sudo -u trainer gpudoctor diagnose" in why
    note = process_tree.none_instrumented(watch.uninstrumented)
    assert note.startswith("no Python process of the command was instrumented: pid 4321")
    assert process_tree.none_instrumented({}) == "no Python process of the command was instrumented"


def test_a_process_of_another_user_with_the_agent_that_cannot_write(monkeypatch, tmp_path) -> None:
    """gpudoctor as root, the workload dropped to another user with its environment kept
    (gosu, setpriv): the agent loads but cannot write the session directory."""
    session = tmp_path / "session"
    session.mkdir(mode=0o700)

    class KeepsItsEnvironment(_OtherUsersPython):
        def environ(self) -> dict[str, str]:
            return {"PYTHONPATH": "/site", "GPUDOCTOR_SESSION_DIR": str(session)}

    monkeypatch.setattr(process_tree.psutil, "Process", lambda pid: KeepsItsEnvironment())
    watch = process_tree.TreeWatch(str(session), "/site")
    watch.scan(4321, instrumented=())
    assert "it runs as another user (trainer" in watch.uninstrumented[4321]
    session.chmod(0o777)  # a directory that user may write: its agent reports, nothing to say
    again = process_tree.TreeWatch(str(session), "/site")
    again.scan(4321, instrumented=())
    assert again.uninstrumented == {}
