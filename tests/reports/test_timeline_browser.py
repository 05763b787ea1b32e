"""The timeline of the profiled window, in headless Chromium, on two H200 recordings.

`starved_loader` (input-bound: num_workers=0) and `tiny_kernels` (launch-bound: thousands of
tiny kernels per step): the timeline renders (rows, idle gaps, axis ticks written by our
hashed script), its legend sums to the GPU's idle time, clicking a finding's link highlights
the gaps of that finding's cause and only those, and the page stays under 2 MB. Driven like
test_browser.py (Debian's Chromium over the DevTools pipe); screenshots go to
build/test-artifacts/; with GPUDOCTOR_UPDATE_SCREENSHOTS=1 the timeline and the top finding's
card are also written to docs/examples/ (the README shows them).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
from test_browser import ARTIFACTS, DevTools, _evaluate, _open, _screenshot
from test_browser import browser as browser

from gpudoctor.reports import html
from gpudoctor.session import Session
from gpudoctor.verdict.judge import judge

pytestmark = pytest.mark.integration  # every test here starts a process

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
MAX_HTML_BYTES = 2 * 1024 * 1024
DOCS = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _render(name: str, out: Path) -> tuple[Path, Session]:
    session = Session.load(H200 / f"{name}.session.json")
    page = out / f"{name}.html"
    page.write_text(html.render(judge(session).report), encoding="utf-8")
    return page, session


def _problems(browser: DevTools) -> list[Any]:
    events = browser.events
    return [e for e in events if e.get("method") == "Runtime.exceptionThrown"] + [
        e for e in events if e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") in ("error",
                                                                                                          "warning")
    ] + [e for e in events if e.get("method") == "Runtime.consoleAPICalled"
         and e["params"].get("type") in ("error", "warning", "assert")]


@pytest.mark.parametrize(("name", "cause"), [("starved_loader", "data"), ("tiny_kernels", "optimizer")])
def test_timeline_renders_sums_and_highlights(browser: DevTools, tmp_path: Path, name: str, cause: str) -> None:
    page, session = _render(name, tmp_path)
    assert page.stat().st_size < MAX_HTML_BYTES
    tab = _open(browser, page)
    assert _problems(browser) == []  # no script error, no CSP violation

    assert _evaluate(browser, tab, "document.querySelectorAll('#timeline svg.tl-plot').length") == 1
    assert _evaluate(browser, tab, "document.querySelectorAll('svg.tl-plot path.tl-gpu').length") >= 1
    assert _evaluate(browser, tab, "document.querySelectorAll('svg.tl-plot rect.gap').length") > 0
    assert _evaluate(browser, tab, "document.querySelectorAll('svg.tl-axis text').length") >= 2  # our script ran
    width = _evaluate(browser, tab, "document.querySelector('svg.tl-plot').getBoundingClientRect().width")
    assert width > 500

    # the legend's causes add up to the GPU's idle time, which is the profile's
    keys = _evaluate(browser, tab, "[...document.querySelectorAll('.tl-key[data-cause]')].map(k => +k.dataset.us)")
    total = _evaluate(browser, tab, "+document.querySelector('.tl-total').dataset.idleUs")
    assert session.profile is not None
    assert total == pytest.approx(session.profile.gpu_idle_us)
    assert sum(keys) == pytest.approx(total, abs=0.01)
    assert _evaluate(browser, tab, "document.querySelector('.tl-key[data-cause]').dataset.cause") == cause

    # the top finding's link lights up exactly the gaps of its cause
    link = _evaluate(browser, tab, "document.querySelector('a.tl-link').dataset.cause")
    assert link == cause
    expected = _evaluate(browser, tab, f"document.querySelectorAll('rect.gap[data-cause={cause}]').length")
    _evaluate(browser, tab, "document.querySelector('a.tl-link').click()")
    assert expected > 0
    assert _evaluate(browser, tab, "+document.querySelector('svg.tl-plot').dataset.highlighted") == expected
    assert _evaluate(browser, tab, "[...document.querySelectorAll('rect.gap.on')].every("
                                   f"g => g.dataset.cause === '{cause}')")
    assert _evaluate(browser, tab, "document.querySelector('svg.tl-plot').classList.contains('hl')")
    title = _evaluate(browser, tab, f"document.querySelector('rect.gap[data-cause={cause}] title').textContent")
    assert title.startswith("idle ")

    # zoom: the buttons narrow the view, the reset restores it
    _evaluate(browser, tab, "document.querySelector('.tl-tools button[data-zoom=in]').click()")
    zoomed = _evaluate(browser, tab, "document.querySelector('svg.tl-plot').viewBox.baseVal.width")
    _evaluate(browser, tab, "document.querySelector('.tl-tools button[data-zoom=reset]').click()")
    assert zoomed == pytest.approx(500.0)
    assert _evaluate(browser, tab, "document.querySelector('svg.tl-plot').viewBox.baseVal.width") == 1000.0

    _evaluate(browser, tab, "document.querySelector('a.tl-link').click()")  # a second click: highlight off
    assert _evaluate(browser, tab, "document.querySelectorAll('rect.gap.on').length") == 0
    _evaluate(browser, tab, "document.querySelector('a.tl-link').click()")
    _evaluate(browser, tab, "document.getElementById('timeline').scrollIntoView()")
    assert _screenshot(browser, tab, f"timeline-{name}.png").stat().st_size > 10_000
    (ARTIFACTS / f"timeline-{name}.html").write_bytes(page.read_bytes())

    if os.environ.get("GPUDOCTOR_UPDATE_SCREENSHOTS"):
        _clip(browser, tab, "document.getElementById('timeline')", DOCS / f"timeline-{name}-h200.png")


def _clip(browser: DevTools, tab: str, element: str, out: Path) -> None:
    box = _evaluate(browser, tab, f"(() => {{ const r = {element}.getBoundingClientRect(); "
                                  "return [r.left, r.top + window.scrollY, r.width, r.height]; })()")
    x, y, w, h = box
    shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                   "clip": {"x": x - 8, "y": y - 8, "width": w + 16, "height": h + 16,
                                                            "scale": 1}}, session=tab)
    out.write_bytes(base64.b64decode(shot["data"]))
