"""`gpudoctor checks`: the catalog as a table or tab-separated lines."""

from __future__ import annotations

import argparse

import pytest

from gpudoctor.commands import catalog
from gpudoctor.model import Check
from gpudoctor.verdict.registry import PluginError

HOSTILE = "Evil\x1b]0;pwned\x07\x1b[2J\nGD999 fake line"


@pytest.mark.parametrize("plain", [False, True])
def test_plugin_strings_are_shown_as_escapes(monkeypatch, capsys, plain: bool) -> None:
    """Issue 27, item 13: a plugin's title (and its load error) reached the terminal raw."""
    evil = Check(id="EV101", slug="evil\x1b[31m", stage=1, title=HOSTILE, run=lambda s: [])
    monkeypatch.setattr(catalog, "load_checks", lambda: ([evil], [PluginError("evil\x1b[1m", "boom\x1b[2J")]))
    catalog.list_checks(argparse.Namespace(plain=plain))
    out, err = capsys.readouterr()
    for text in (out, err):
        assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;pwned" in out
    assert not any(line.lstrip("│ ").startswith("GD999") for line in out.splitlines())  # no forged line
