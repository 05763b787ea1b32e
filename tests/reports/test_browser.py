"""Open a generated report in headless Chromium and watch it like a reader would.

Drives Debian's Chromium (no browser download) over the DevTools protocol on
`--remote-debugging-pipe`, standard library only: the page must load with no
console error, no CSP violation and no network request beyond its own file; the
findings, the charts and the copy buttons (our hashed script ran) must be there.
Screenshots (light, dark) and the page go to build/test-artifacts/ (git-ignored).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from synthetic import make_report, make_result, make_session

from gpudoctor.reports import html

pytestmark = pytest.mark.integration  # every test here starts a process

ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


_TRAMPOLINE = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"
)


def _above(fd: int, minimum: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, minimum)
    os.close(fd)
    return moved


class DevTools:
    """A minimal DevTools client over the pipe: NUL-separated JSON on fds 3 (in) and 4 (out)."""

    def __init__(self, binary: str, profile_dir: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # move the child's ends above 4 so putting them on 3 and 4 cannot clobber them
        to_browser_r, from_browser_w = _above(to_browser_r, 10), _above(from_browser_w, 10)
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", f"--user-data-dir={profile_dir}", "--remote-debugging-pipe", "about:blank"]
        # the browser reads commands on fd 3 and writes on fd 4: a tiny Python
        # trampoline puts our pipe ends there and execs it (no preexec_fn: thread-safe;
        # not sh: dash cannot redirect fds above 9)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _TRAMPOLINE, str(to_browser_r), str(from_browser_w), binary, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(to_browser_r, from_browser_w),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply is None:
                raise TimeoutError(f"no reply to {method}")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read(deadline)
            if event is None:
                raise TimeoutError(f"no {method} event")
            self.events.append(event)
            if event.get("method") == method:
                return event

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (event := self._read(deadline)) is not None:
            self.events.append(event)

    def _read(self, deadline: float) -> dict[str, Any] | None:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                return None
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                return None
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    binary = _chromium()
    if binary is None:
        pytest.skip("Chromium not installed (Debian: apt-get install chromium); the browser test needs it")
    tools = DevTools(binary, tmp_path_factory.mktemp("chromium-profile"))
    try:
        tools.send("Browser.getVersion", timeout=60)  # the first start can be slow
    except (TimeoutError, OSError) as exc:
        tools.close()
        pytest.skip(f"Chromium did not start: {exc}")
    yield tools
    tools.close()


def _open(browser: DevTools, path: Path) -> str:
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.send(f"{domain}.enable", session=session)
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    browser.events.clear()
    browser.send("Page.navigate", {"url": path.as_uri()}, session=session)
    browser.wait_for("Page.loadEventFired")
    browser.drain(0.5)  # late console messages or requests would show up here
    return session


def _evaluate(browser: DevTools, session: str, expression: str) -> Any:
    return browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)[
        "result"
    ].get("value")


def _screenshot(browser: DevTools, session: str, name: str) -> Path:
    shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session=session)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / name
    out.write_bytes(base64.b64decode(shot["data"]))
    return out


def test_report_opens_clean_offline_with_findings_and_charts(browser: DevTools, tmp_path: Path) -> None:
    report = make_report(
        make_session(hostile=HOSTILE), make_result(hostile=HOSTILE), docs={"GD102": "Input pipeline stall."}
    )
    page = tmp_path / "report.html"
    page.write_text(html.render(report), encoding="utf-8")
    session = _open(browser, page)

    requests = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    assert [u for u in requests if u != page.as_uri() and not u.startswith("data:")] == []
    console = [
        e["params"]
        for e in browser.events
        if e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") in ("error", "warning", "assert")
    ]
    logged = [
        e["params"]["entry"]
        for e in browser.events
        if e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") in ("error", "warning")
    ]
    thrown = [e["params"] for e in browser.events if e.get("method") == "Runtime.exceptionThrown"]
    assert (console, logged, thrown) == ([], [], [])  # CSP violations would be Log errors

    assert _evaluate(browser, session, "document.querySelectorAll('article.finding').length") == 3
    assert (
        _evaluate(browser, session, "[...document.querySelectorAll('article.finding')].map(a => a.id).join(',')")
        == "GD102,GD304,GD201"
    )
    assert _evaluate(browser, session, "document.querySelectorAll('figure.chart svg').length") == 3
    assert (
        _evaluate(browser, session, "document.querySelectorAll('img, iframe').length") == 0
    )  # the hostile markup stayed text
    assert _evaluate(browser, session, "document.querySelectorAll('button.copy').length") >= 2  # our hashed script ran
    assert HOSTILE in _evaluate(browser, session, "document.body.innerText")
    assert _screenshot(browser, session, "report.png").stat().st_size > 10_000

    browser.send(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}, session=session
    )
    background = _evaluate(browser, session, "getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(13, 17, 23)"
    _screenshot(browser, session, "report-dark.png")
    pdf = browser.send("Page.printToPDF", {"printBackground": False}, session=session)
    assert len(base64.b64decode(pdf["data"])) > 10_000
    shutil.copy(page, ARTIFACTS / "report.html")
