"""The HTML report: self-contained, escaped, readable without having run anything."""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser

import pytest
from synthetic import make_report, make_result, make_session

from gpudoctor.reports import html, render

HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "'><svg onload=alert(1)>",
    "</code></pre><iframe src=https://evil.example/></iframe>",
    "{{ 7*7 }}{% raw %}",
    "javascript:alert(1)",
]


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside <script> elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


def parse(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


@pytest.fixture(scope="module")
def page() -> str:
    return html.render(make_report(files={"html": "train.html", "json": "train.json", "session": "train.session.json"}))


def test_csp_meta_comes_first_and_forbids_the_network(page: str) -> None:
    head = page[: page.index("</head>")]
    first_meta = re.search(r"<meta[^>]*>", head)
    assert first_meta and 'http-equiv="Content-Security-Policy"' in first_meta.group(0)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', head)
    assert csp is not None
    policy = csp.group(1).replace("&#39;", "'")
    assert "default-src 'none'" in policy and "img-src data:" in policy and "style-src 'unsafe-inline'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1]  # scripts only by hash


def test_the_only_script_matches_its_csp_hash(page: str) -> None:
    tags = parse(page)
    scripts = [attrs for tag, attrs in tags.tags if tag == "script"]
    assert len(scripts) == 1 and "src" not in scripts[0]
    digest = base64.b64encode(hashlib.sha256("".join(tags.scripts).encode()).digest()).decode()
    assert f"'sha256-{digest}'" in page.replace("&#39;", "'")


def test_no_external_references(page: str) -> None:
    assert not re.search(r"https?://", page)
    for tag, attrs in parse(page).tags:
        assert tag not in ("img", "iframe", "object", "embed", "link") or attrs.get("href") == "data:,", tag
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name in ("href", "src", "xlink:href", "action"):
                assert value and (value.startswith("#") or value == "data:,"), (tag, name, value)
    assert "@import" not in page
    assert set(re.findall(r"url\((.)", page)) <= {"#"}  # SVG clip paths: references inside the page


def test_verdict_first_then_findings_in_engine_order(page: str) -> None:
    h1 = re.search(r"<h1>(.*?)</h1>", page, re.DOTALL)
    assert h1 and h1.group(1).startswith("Input-bound: the loop waited for data")
    positions = [page.index(f'id="{fid}"') for fid in ("GD102", "GD304", "GD201")]
    assert positions == sorted(positions)
    assert "Consequence of" in page and 'href="#GD102"' in page


def test_finding_has_numbers_remedy_code_and_explain_page(page: str) -> None:
    assert "62%" in page and "steady steps 4-500" in page
    assert '<pre class="code"><code>DataLoader(ds, num_workers=8, pin_memory=True)  # </code></pre>' in page
    assert "<details><summary>Why it matters: GD102 (input-stall), input pipeline</summary>" in page
    assert "The training loop waits for the DataLoader a large share of each step." in page
    assert "gpudoctor explain GD304" in page  # no doc for GD304 in this report: say where it is


def test_evidence_sections_and_charts(page: str) -> None:
    assert page.count("<svg") == 3  # timeline, step breakdown, kernel histogram
    for text in (
        "ampere_sgemm_128x64_nn",
        "aten::item",
        "train.py:42",
        "HtoD",
        "Inactive split",
        "19.0 GiB",
        "NVIDIA H200",
        "580.65.06",
        "2.11.0+cu128",
        "Synthetic CPU",
        "Usable cores",
        "storage: no dataset path known",
        "python train.py --epochs 3",
        "train.session.json",
    ):
        assert text in page, text
    svg = re.search(r"<svg.*?</svg>", page, re.DOTALL)
    assert svg is not None
    assert "<text" in svg.group(0) and "font-face" not in svg.group(0)  # text, not embedded glyphs


def test_missing_data_is_a_note_never_an_empty_chart() -> None:
    page = html.render(make_report(make_session(with_gpu=False, with_profile=False)))
    assert "Not measured: profile: CPU-only run." in page
    assert "Not measured: allocator: no CUDA device used." in page
    assert page.count("<svg") == 2  # CPU + data wait timeline, step breakdown: still measured
    bare = html.render({"schema": "gpudoctor.report/1", "summary": {"verdict": "x"}})
    assert "<svg" not in bare and bare.count("Not measured:") == 4


def test_print_and_dark_mode_styles(page: str) -> None:
    assert "@media print" in page and "prefers-color-scheme: dark" in page


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_strings_are_escaped_everywhere(hostile: str) -> None:
    report = make_report(make_session(hostile=hostile), make_result(hostile=hostile), docs={"GD102": "doc " + hostile})
    page = render(report, "html")
    tags = parse(page)
    assert [t for t, _ in tags.tags].count("script") == 1
    assert not [t for t, _ in tags.tags if t in ("img", "iframe")]
    for tag, attrs in tags.tags:
        assert not any(name.startswith("on") for name in attrs), tag
        assert not any("javascript:" in (value or "") for value in attrs.values()), tag
    escaped = (
        hostile.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&#34;")
        .replace("'", "&#39;")
    )
    if escaped != hostile:
        assert hostile not in page
    assert escaped in page  # shown as text (so "{{ 7*7 }}" stays literal: data is never a template)


def test_ten_minute_session_stays_small() -> None:
    """0.5 s CPU/GPU samples for 10 minutes and 6000 steps: the timeline is thinned, so
    the page stays an attachment, not a download."""
    report = make_report(make_session(duration_s=600.0, sample_interval_s=0.5, steps=6000))
    page = html.render(report)
    assert len(page.encode()) < 400_000
    assert len(render(report, "json").encode()) < 300_000


def test_the_hotspot_tables_name_call_sites_kernels_and_operators(report) -> None:
    from gpudoctor.reports import html

    page = html.render(report)
    section = page[page.index('id="hotspots"') :]
    assert "profiled window 1 (start, 10 steps): DataLoader batches" in section
    assert "<code>train_step (train.py:40)</code>" in section and "74%" in section
    assert "<code>aten::addmm</code>" in section and "<code>ampere_sgemm_128x64_nn</code>" in section
    assert "3.0 ms (10)" in section  # blocked in 10 syncs


def test_the_json_report_carries_every_window_and_its_hotspots(report) -> None:
    evidence = report["evidence"]
    assert [p["index"] for p in evidence["profiles"]] == [1]
    (table,) = evidence["hotspots"]
    assert table["name"] == "profiled window 1 (start, 10 steps)"
    assert table["call_sites"][0]["site"] == "train_step (train.py:40)"
    assert table["cpu_ops"][0] == {"name": "aten::addmm", "count": 300, "self_us": 60_000.0, "share_of_window": 0.05}
