"""The ticket/PR comment: readable Markdown that no string from the run can break."""

from __future__ import annotations

import re
from typing import Any

from gpudoctor.reports import markdown, render


def test_verdict_table_remedies_skipped(report: dict[str, Any]) -> None:
    md = markdown.render(report)
    assert md.startswith("### gpudoctor: Input-bound")
    assert "| ID | Severity | Finding | Key numbers | Est. gain |" in md
    rows = [line for line in md.splitlines() if line.startswith("| GD")]
    assert [r.split("|")[1].strip() for r in rows] == ["GD102", "GD304", "GD201"]
    assert "(consequence of GD201)" not in md and "(consequence of GD102)" in md
    assert "```python\nDataLoader(ds, num_workers=8, pin_memory=True)  #\n```" in md
    assert "- GD104 (skipped): storage: no dataset path known" in md
    assert "`python train.py --epochs 3`" in md


def test_table_survives_pipes_and_newlines(report_factory: Any) -> None:
    from synthetic import make_result

    md = markdown.render(report_factory(result=make_result(hostile=" a|b\nc ")))
    for row in (line for line in md.splitlines() if line.startswith("| GD")):
        assert len(re.findall(r"(?<!\\)\|", row)) == 6  # 5 columns, pipes inside escaped


def test_html_in_text_is_escaped(report_factory: Any) -> None:
    from synthetic import make_result

    hostile = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'
    md = render(report_factory(result=make_result(hostile=hostile)), "markdown")
    outside_code = re.sub(r"```.*?```", "", md, flags=re.DOTALL)
    assert "<script>" not in outside_code and "<img" not in outside_code
    assert "&lt;script&gt;" in outside_code


def test_code_fence_outgrows_backticks_in_code() -> None:
    block = markdown.code_block("x = '```'\n")
    assert block.startswith("````") and block.endswith("````")
    assert markdown.code_span("a`b") == "``a`b``"
