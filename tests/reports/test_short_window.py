"""A window shorter than 0.1 s is headed in ms (or us), never '0.0 s'; `report --quiet`
is covered by test_report_command.test_report_quiet_writes_the_files_without_a_summary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudoctor import cli
from gpudoctor.metrics import format_run_seconds

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "traces" / "copies.json.gz"  # a 33.2 ms window


@pytest.mark.parametrize(("seconds", "shown"), [(0.033228, "33.2 ms"), (0.00005, "50 us"), (0.1, "0.1 s"),
                                                (41.23, "41.2 s")])
def test_run_seconds(seconds: float, shown: str) -> None:
    assert format_run_seconds(seconds) == shown


@pytest.mark.parametrize("fmt", ["terminal", "markdown"])
def test_a_short_window_is_shown_in_ms(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["analyze", str(TRACE), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\b33\.\d ms", out), out[:300]  # the report's duration, 0.033 s
    assert "0.0 s" not in out
