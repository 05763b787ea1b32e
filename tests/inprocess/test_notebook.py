"""Jupyter: the report displays inline in an iframe; the progress line updates from a thread."""

from __future__ import annotations

import html
import json
import sys
import types

import pytest

import gpudoctor
from gpudoctor.inprocess import progress
from gpudoctor.inprocess.recorder import Progress
from gpudoctor.inprocess.result import Report

from .conftest import train


@pytest.fixture(scope="module")
def report() -> Report:
    with gpudoctor.watch("nb", interval=0.1) as w:
        train(15)
    assert w.report() is not None
    return w.report()


def test_repr_html_is_the_self_contained_report_in_an_iframe(report):
    shown = report._repr_html_()
    assert shown.startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in shown
    inner = shown.split('srcdoc="', 1)[1].split('" sandbox=', 1)[0]
    assert "<" not in inner and '"' not in inner  # all of it escaped: nothing leaks into the notebook
    page = html.unescape(inner)
    assert page == report.html()
    assert "Content-Security-Policy" in page and "default-src" in page


def test_the_report_is_the_json_report_dict(report):
    saved = json.loads(report.to_json())
    assert saved["summary"]["verdict"] == report["summary"]["verdict"]
    # for Python, skipped checks are in report.checks, not "below" (a run with no finding says so)
    assert report.verdict == saved["summary"]["verdict"].replace("see why below", "see why in report.checks")
    assert [f["id"] for f in saved["findings"]] == report.ids
    assert dict(report)["checks"] == report.checks
    assert report.verdict in repr(report) and "gpudoctor" in str(report)


def test_no_notebook_no_progress(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert not progress.in_notebook()
    assert type(progress.make_progress(None)) is progress.ProgressDisplay
    assert type(progress.make_progress(False)) is progress.ProgressDisplay


class _Handle:
    def __init__(self):
        self.shown = []

    def update(self, obj):
        self.shown.append(repr(obj))


@pytest.fixture
def fake_jupyter(monkeypatch):
    """A stand-in IPython kernel: get_ipython() is a ZMQInteractiveShell; display() gives a handle."""
    handle = _Handle()

    class ZMQInteractiveShell:
        pass

    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: ZMQInteractiveShell()
    display = types.ModuleType("IPython.display")

    def show(obj, display_id=False):
        handle.shown.append(repr(obj))
        return handle

    display.display = show
    ipython.display = display
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    return handle


def test_in_a_notebook_the_progress_line_updates_in_place(fake_jupyter):
    assert progress.in_notebook()
    shown = progress.make_progress(None)
    assert isinstance(shown, progress.NotebookProgress)
    shown.start()
    shown.update(Progress(elapsed_s=3.2, steps=40, data_wait_share=0.62, gpu_util_percent=17.0))
    shown.stop("gpudoctor: watched 3 s, 40 steps.")
    assert fake_jupyter.shown[0] == "gpudoctor watching: starting"
    assert fake_jupyter.shown[1] == "gpudoctor watching: 3 s, 40 steps, data wait 62%, GPU util 17%"
    assert fake_jupyter.shown[-1] == "gpudoctor: watched 3 s, 40 steps."


def test_a_watch_in_a_notebook_shows_progress_then_the_verdict(fake_jupyter):
    with gpudoctor.watch(interval=0.1) as w:
        train(60, sleep_s=0.02)
    lines = fake_jupyter.shown
    assert any(line.startswith("gpudoctor watching: ") and "steps" in line for line in lines[1:-1])
    assert lines[-1].startswith("gpudoctor: watched") and w.report().verdict in lines[-1]


def test_a_failing_display_is_switched_off(fake_jupyter):
    def broken(obj):
        raise OSError("kernel gone")

    shown = progress.make_progress(None)
    shown.start()
    shown.handle.update = broken
    shown.update(Progress(1.0, 1, None, None))  # no exception
    assert shown.handle is None


def test_str_of_a_report_in_jupyter_is_text_only(report, monkeypatch):
    """Issue 27, item 23: print(report) in Jupyter printed twice (rich also displayed it, its
    lines padded to a width of 100,000 columns)."""
    import rich.console

    shown = []
    fake = types.ModuleType("IPython.display")
    fake.display = lambda *args, **kwargs: shown.append(args)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    monkeypatch.setitem(sys.modules, "IPython.display", fake)
    monkeypatch.setattr(rich.console, "_is_jupyter", lambda: True)
    text = str(report)
    assert shown == []  # print() shows it once; rendering it displayed nothing
    assert text.startswith("gpudoctor ") and all(line == line.rstrip() for line in text.splitlines())


def test_the_python_verdict_points_at_the_checks_not_below():
    """Issue 27, item 23: "see why below" in Python and Jupyter, where nothing is below."""
    verdict = "No bottleneck found by the 1 of 20 checks that could run (19 skipped: see why below)."
    report = Report({"summary": {"verdict": verdict}})
    assert report.verdict == ("No bottleneck found by the 1 of 20 checks that could run (19 skipped: see why in "
                              "report.checks).")
    assert report["summary"]["verdict"] == verdict  # the JSON report is the same as diagnose writes
