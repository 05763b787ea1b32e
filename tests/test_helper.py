"""The HTML rendered by the helper process is the HTML rendered here; a lost helper costs nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpudoctor import reports
from gpudoctor.cli import main
from gpudoctor.commands import analyze
from gpudoctor.replay import background
from gpudoctor.run import analyze_helper as helper_module
from gpudoctor.run.analyze_helper import Helper

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
WINDOWS = Path(__file__).resolve().parent / "fixtures" / "h200" / "windows"


GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden"


@pytest.fixture
def report() -> dict:
    return json.loads((GOLDEN / "h200__healthy.report.json").read_text())


@pytest.mark.integration
@needs_fork
def test_the_helper_renders_the_same_html(report, monkeypatch) -> None:
    monkeypatch.setattr(helper_module, "spare_core", lambda: True)
    with Helper.start(("html",)) as helper:
        assert helper.active
        assert helper.render(report, "html") == reports.render(report, "html")
        assert helper.render(report, "json") == reports.render(report, "json")  # not its format: rendered here
        with pytest.raises(RuntimeError, match="DecodeError: 'schema' is not a string"):
            helper.render({"schema": 3}, "html")  # the renderer's own error, raised here
        assert helper.active  # and the helper goes on


@pytest.mark.integration
@needs_fork
def test_a_lost_helper_renders_here(report, monkeypatch) -> None:
    monkeypatch.setattr(helper_module, "spare_core", lambda: True)
    helper = Helper.start(("html",))
    helper._process.kill()
    helper._process.join()
    assert helper.render(report, "html") == reports.render(report, "html")
    assert not helper.active  # given up on
    helper.close()


@pytest.mark.integration
@needs_fork
def test_the_json_begun_ahead_is_the_json_rendered_here(report, monkeypatch) -> None:
    monkeypatch.setattr(helper_module, "spare_core", lambda: True)
    with Helper.start() as helper:  # renders nothing of its own (a split trace's helper)
        assert helper.render_ahead(report, "json")
        assert not helper.render_ahead(report, "html")  # not one it takes: rendered here
        assert helper.render(report, "html") == reports.render(report, "html")
        assert helper.render(report, "json") == reports.render(report, "json")  # the helper's answer
        assert helper.render_ahead({"schema": 3}, "json")
        with pytest.raises(RuntimeError, match="DecodeError: 'schema' is not a string"):
            helper.render({"schema": 3}, "json")  # the renderer's own error, raised here
        assert helper.active
    with Helper.start(("html",)) as helper:  # it renders the page: the JSON stays here
        assert not helper.render_ahead(report, "json")


@pytest.mark.integration
@needs_fork
def test_a_helper_lost_after_render_ahead_renders_here(report, monkeypatch) -> None:
    monkeypatch.setattr(helper_module, "spare_core", lambda: True)
    helper = Helper.start()
    helper._process.kill()
    helper._process.join()
    helper.render_ahead(report, "json")  # sent, or the loss already seen
    assert helper.render(report, "json") == reports.render(report, "json")
    assert not helper.active
    helper.close()


def test_without_a_spare_core_everything_happens_here(report, monkeypatch) -> None:
    monkeypatch.setattr(helper_module, "spare_core", lambda: False)
    with Helper.start(("html",), fail_on="warning") as helper:  # a fork here would fail the test
        assert not helper.active
        assert helper.render(report, "junit") == reports.render(report, "junit", fail_on="warning")


@pytest.mark.integration
@needs_fork
@pytest.mark.parametrize("compressed", [True, False], ids=["gzip", "plain"])
def test_analyze_of_a_long_trace_writes_the_same_reports(tmp_path, monkeypatch, compressed) -> None:
    """A trace counted long: the helper replays it and renders its HTML (gzip), or decodes its
    second half and replays it (plain); the files equal those of the same analysis done in
    one process."""
    import gzip

    from gpudoctor.collectors import trace_decode, trace_share

    trace = WINDOWS / "item_per_layer.trace.json.gz"
    if not compressed:
        trace = tmp_path / "item_per_layer.trace.json"
        trace.write_bytes(gzip.decompress((WINDOWS / "item_per_layer.trace.json.gz").read_bytes()))
        monkeypatch.setattr(trace_decode, "SPLIT_MIN_BYTES", 0)
        halves = []
        real = trace_decode._halves
        monkeypatch.setattr(trace_decode, "_halves", lambda *a: halves.append(index := real(*a)) or index)
        shared = []  # the second half read from the memory file, where there is one (trace_share)
        restore = trace_share.restore
        monkeypatch.setattr(trace_share, "restore", lambda *a: shared.append(True) or restore(*a))
    monkeypatch.setattr(helper_module, "spare_core", lambda: True)
    monkeypatch.setattr(analyze, "LONG_TRACE_BYTES", 0)
    monkeypatch.setattr(background, "PARALLEL_MIN_EVENTS", 0)
    assert main(["analyze", str(trace), "--out", str(tmp_path / "helped" / "r"), "--quiet"]) == 0
    if not compressed:
        assert len(halves) == 1 and halves[0] is not None  # decoded in two halves, joined
        assert shared == ([True] if hasattr(os, "memfd_create") else [])
    helped, here = _and_without_the_helper(trace, tmp_path, monkeypatch)
    assert helped == here
    helped_html, here_html = ((tmp_path / d / "r.html").read_text() for d in ("helped", "here"))
    assert helped_html.count("<svg") == here_html.count("<svg") > 0
    assert helped_html == here_html


@pytest.mark.integration
@needs_fork
def test_columns_that_cannot_be_read_from_the_memory_files_are_made_here(tmp_path, monkeypatch) -> None:
    """Neither the decoded half nor the part to replay can be read back (trace_share.restore
    fails in both processes): the trace is decoded whole and replayed here, the same reports."""
    import gzip

    from gpudoctor.collectors import trace_decode, trace_share

    trace = tmp_path / "item_per_layer.trace.json"
    trace.write_bytes(gzip.decompress((WINDOWS / "item_per_layer.trace.json.gz").read_bytes()))
    monkeypatch.setattr(trace_decode, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(helper_module, "spare_core", lambda: True)
    monkeypatch.setattr(analyze, "LONG_TRACE_BYTES", 0)
    monkeypatch.setattr(background, "PARALLEL_MIN_EVENTS", 0)

    def unreadable(*args):
        raise OSError("no map")

    monkeypatch.setattr(trace_share, "restore", unreadable)
    assert main(["analyze", str(trace), "--out", str(tmp_path / "helped" / "r"), "--quiet"]) == 0
    helped, here = _and_without_the_helper(trace, tmp_path, monkeypatch)
    assert helped == here
    assert not helped["evidence"]["profile"]["replay"].get("error")  # replayed, here


@pytest.mark.integration
@needs_fork
def test_ctrl_c_is_left_to_the_main_process(report, monkeypatch) -> None:
    """Ctrl-C reaches the whole process group; the helper neither dies with a traceback nor stops
    serving (the main process answers the interrupt and closes it)."""
    import signal
    import time

    monkeypatch.setattr(helper_module, "spare_core", lambda: True)
    with Helper.start(("html",)) as helper:
        assert helper.render(report, "html")  # it has set up its handlers by now
        os.kill(helper._process.pid, signal.SIGINT)
        time.sleep(0.2)
        assert helper._process.is_alive()
        assert helper.render(report, "html") == reports.render(report, "html")


def _and_without_the_helper(trace, tmp_path, monkeypatch) -> tuple[dict, dict]:
    """The JSON report of the run already written under helped/ and of the same trace analysed
    with no helper (under here/), each without the replay's own timing."""
    monkeypatch.setattr(analyze, "LONG_TRACE_BYTES", 1 << 40)
    assert main(["analyze", str(trace), "--out", str(tmp_path / "here" / "r"), "--quiet"]) == 0
    helped, here = (json.loads((tmp_path / d / "r.json").read_text()) for d in ("helped", "here"))
    for data in (helped, here):
        data["evidence"]["profile"]["replay"].pop("seconds")
    return helped, here
