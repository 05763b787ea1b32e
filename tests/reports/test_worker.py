"""The HTML rendered in a forked process is the HTML rendered here; a lost process costs nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpudoctor import reports
from gpudoctor.cli import main
from gpudoctor.commands import analyze
from gpudoctor.reports import worker as worker_module
from gpudoctor.reports.worker import RenderWorker

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
WINDOWS = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "windows"


@pytest.mark.integration
def test_the_forked_renderer_gives_the_same_html(report, monkeypatch) -> None:
    monkeypatch.setattr(worker_module, "spare_core", lambda: True)
    with RenderWorker.start(("html",)) as worker:
        assert worker._process is not None
        assert worker.render(report, "html") == reports.render(report, "html")
        assert worker.render(report, "json") == reports.render(report, "json")  # not its format: rendered here
        with pytest.raises(RuntimeError, match="DecodeError: 'schema' is not a string"):
            worker.render({"schema": 3}, "html")  # the renderer's own error, raised here


@pytest.mark.integration
def test_a_lost_render_process_renders_here(report, monkeypatch) -> None:
    monkeypatch.setattr(worker_module, "spare_core", lambda: True)
    worker = RenderWorker.start(("html",))
    worker._process.kill()
    worker._process.join()
    assert worker.render(report, "html") == reports.render(report, "html")
    assert worker._conn is None  # given up on
    worker.close()


def test_without_a_spare_core_everything_renders_here(report, monkeypatch) -> None:
    monkeypatch.setattr(worker_module, "spare_core", lambda: False)
    with RenderWorker.start(("html",), fail_on="warning") as worker:  # a fork here would fail the test
        assert worker._process is None
        assert worker.render(report, "junit") == reports.render(report, "junit", fail_on="warning")


@pytest.mark.integration
def test_analyze_of_a_long_trace_writes_the_same_reports(tmp_path, monkeypatch) -> None:
    """A trace counted long: its HTML comes from the render process, its replay from the replay
    process; the files equal those of the same analysis done in one process."""
    trace = WINDOWS / "item_per_layer.trace.json.gz"
    monkeypatch.setattr(worker_module, "spare_core", lambda: True)
    monkeypatch.setattr(analyze, "LONG_TRACE_BYTES", 0)
    from gpudoctor.replay import background

    monkeypatch.setattr(background, "PARALLEL_MIN_EVENTS", 0)
    monkeypatch.setattr(background.forking, "spare_core", lambda: True)
    assert main(["analyze", str(trace), "--out", str(tmp_path / "forked" / "r"), "--quiet"]) == 0
    monkeypatch.setattr(analyze, "LONG_TRACE_BYTES", 1 << 40)
    monkeypatch.setattr(background, "PARALLEL_MIN_EVENTS", 1 << 40)
    assert main(["analyze", str(trace), "--out", str(tmp_path / "here" / "r"), "--quiet"]) == 0
    forked = json.loads((tmp_path / "forked" / "r.json").read_text())
    here = json.loads((tmp_path / "here" / "r.json").read_text())
    for data in (forked, here):
        data["evidence"]["profile"]["replay"].pop("seconds")
        data.pop("started_at", None)
    assert forked == here
    forked_html, here_html = ((tmp_path / d / "r.html").read_text() for d in ("forked", "here"))
    assert forked_html.count("<svg") == here_html.count("<svg") > 0
    assert forked_html == here_html
