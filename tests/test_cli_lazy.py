"""The top-level parser lists every command without importing its module; running a
command imports only its own (and `gpudoctor CMD --help` still shows all its options)."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from gpudoctor import cli
from gpudoctor.base import exitcodes
from gpudoctor.commands import COMMANDS

pytestmark = pytest.mark.integration  # worker processes / the CLI in a subprocess


def test_help_lines_match_what_the_modules_register() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    for module in dict.fromkeys(m for m, _ in COMMANDS.values()):
        importlib.import_module(f"gpudoctor.commands.{module}").register(sub)
    registered = {action.dest: action.help for action in sub._choices_actions}
    assert registered == {name: help_text for name, (_, help_text) in COMMANDS.items()}


def test_help_imports_no_command_module() -> None:
    code = ("import sys\nfrom gpudoctor import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('gpudoctor.commands.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert all(name in out for name in COMMANDS)


def test_a_command_imports_only_its_own_module() -> None:
    code = ("import sys\nfrom gpudoctor import cli\ncli.main(['checks', '--plain'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('gpudoctor.commands.') and m[-8:] != 'argtypes'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['gpudoctor.commands.catalog']"


@pytest.mark.parametrize("command", ["analyze", "report", "explain"])
def test_command_help_shows_its_full_options(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert (f"usage: gpudoctor {command}" in out and "options:" in out) or "optional arguments:" in out


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nope"]) == exitcodes.USAGE
    assert "invalid choice" in capsys.readouterr().err


# what the catalog commands never need: they read each check's declaration, never run one
NOT_FOR_THE_CATALOG = ("gpudoctor.session", "gpudoctor.replay", "gpudoctor.verdict.report_model",
                       "gpudoctor.verdict.engine", "gpudoctor.collectors", "importlib.metadata", "rich.markdown")


@pytest.mark.parametrize("argv", [["checks", "--plain"], ["checks"], ["explain", "GD101"], ["explain", "GD304"]])
def test_the_catalog_imports_no_session_replay_or_metadata(argv: list[str]) -> None:
    """`gpudoctor checks` and `explain` (into a pipe) import every check but none of what running
    one needs (issue 16: the catalog in under 150 ms; benchmarks/analyze_speed.py times it).
    importlib.metadata stays out while no installed distribution declares a check plugin."""
    code = ("import sys\nbefore = set(sys.modules)\nfrom gpudoctor import cli\nfrom gpudoctor.verdict import registry\n"
            f"code = cli.main({argv!r})\n"
            "print(code, registry._may_declare(registry.GROUP))\n"
            "print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    status, new = out.strip().splitlines()[-2:]
    assert status.split()[0] == "0"
    loaded = new.split()
    assert "gpudoctor.checks.gd101_workers" in loaded and "gpudoctor.checks.gd504_rank_starved" in loaded
    unwanted = [m for m in loaded if m.startswith(NOT_FOR_THE_CATALOG)]
    if status.split()[1] == "True":  # a plugin is installed here: its lookup needs importlib.metadata
        unwanted = [m for m in unwanted if not m.startswith("importlib.metadata")]
    assert unwanted == []
