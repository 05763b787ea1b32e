"""Size of HTML reports and how long Chromium takes to show them, the timeline included.

    python3 benchmarks/report_render.py REPORT.html ... [--repeat 5]

For each page: its size, then, in headless Chromium (driven like tests/reports/test_browser.py,
over the DevTools pipe), the median over --repeat fresh loads of the time from navigation to
the load event (the script, the timeline's tick labels included, has run by then) and of the
time to first contentful paint. Make the page with `gpudoctor analyze TRACE` or `gpudoctor
report SESSION`; benchmarks/analyze_speed.py builds the long trace (`build_trace`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reports"))

from test_browser import DevTools, _chromium, _evaluate, _open  # noqa: E402  (the tests' own driver)

TIMING = ("(() => { const n = performance.getEntriesByType('navigation')[0]; "
          "const p = performance.getEntriesByName('first-contentful-paint')[0]; "
          "return [n.loadEventEnd, p ? p.startTime : null, document.querySelectorAll('svg.tl-plot').length]; })()")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    binary = _chromium()
    if binary is None:
        print("Chromium not found (Debian: apt-get install chromium)", file=sys.stderr)
        return 69
    with tempfile.TemporaryDirectory() as profile:
        browser = DevTools(binary, Path(profile))
        try:
            browser.send("Browser.getVersion", timeout=60)
            for page in args.pages:
                loads, paints, plots = [], [], 0
                for _ in range(args.repeat):
                    tab = _open(browser, page.resolve())
                    load, paint, plots = _evaluate(browser, tab, TIMING)
                    loads.append(load)
                    if paint is not None:
                        paints.append(paint)
                    browser.send("Page.close", session=tab)
                paint_text = f"{statistics.median(paints):.0f} ms" if paints else "n/a"
                print(f"{page.name}: {page.stat().st_size / 1e6:.2f} MB, {plots} timeline(s); load event "
                      f"{statistics.median(loads):.0f} ms (median of {len(loads)}; {min(loads):.0f}-{max(loads):.0f}),"
                      f" first contentful paint {paint_text}")
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
