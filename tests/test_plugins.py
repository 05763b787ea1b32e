"""Third-party checks: loaded like the built-ins; one that breaks becomes an error outcome, never a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from helpers import make_session, make_steps

from gpudoctor.reports import render
from gpudoctor.session import CpuSample
from gpudoctor.verdict import registry
from gpudoctor.verdict.judge import judge

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gpudoctor-example-check"

BROKEN = '''
import sys
from gpudoctor.model import Check, Evidence, Finding, Remedy

def ok(session):
    return [Finding(severity="info", title="All fine", message="fine")]

def _check(id, run, **kw):
    return Check(id=id, slug=id.lower(), stage=kw.pop("stage", 1), title=id, run=run, **kw)

RAISES = _check("BAD01", lambda s: 1 / 0)
RETURNS_NONE = _check("BAD02", lambda s: None)
RETURNS_INTS = _check("BAD03", lambda s: [1, 2])
ONE_FINDING = _check("BAD04", lambda s: Finding(severity="info", title="t", message="m"))
BAD_EVIDENCE = _check("BAD05", lambda s: [Finding(severity="info", title="t", message="m",
                                                  evidence={"x": Evidence(object())})])
BAD_GAIN = _check("BAD06", lambda s: [Finding(severity="warning", title="t", message="m", estimated_gain="fast")])
EXITS = _check("BAD07", lambda s: sys.exit(3))
BAD_REMEDY = _check("BAD08", lambda s: [Finding(severity="info", title="t", message="m", remedy="do it")])
BAD_STAGE = _check("BAD09", ok, stage=42)
NOT_A_CHECK = {"id": "BAD10"}
BAD_REQUIRES = _check("BAD11", ok, requires="cpu")
GOOD = _check("GOOD1", ok)
'''


def _entry_points(extra: list[EntryPoint]):
    real = list(registry.entry_points(group=registry.GROUP))

    def fake(group: str):
        assert group == registry.GROUP
        return [*real, *extra]

    return fake


@pytest.fixture
def plugins(monkeypatch, tmp_path):
    """Install entry points (name -> "module:attr") as if packages declared them."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    (tmp_path / "broken_plugins.py").write_text(textwrap.dedent(BROKEN))
    (tmp_path / "import_fails.py").write_text("raise ImportError('needs a library that is not installed')\n")
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(2)\n")

    def install(**entries: str) -> None:
        eps = [EntryPoint(name=name, value=value, group=registry.GROUP) for name, value in entries.items()]
        monkeypatch.setattr(registry, "entry_points", _entry_points(eps))

    yield install
    for name in ("broken_plugins", "import_fails", "exits_on_import", "gpudoctor_example_check"):
        sys.modules.pop(name, None)


def _session(rss_share: float):
    session = make_session(steps=make_steps(30, 0.1))
    session.environment.host_memory_total_bytes = 16 << 30
    session.cpu_samples = [CpuSample(t=float(i), system_percent=20.0, tree_rss_bytes=int(rss_share * (16 << 30)))
                           for i in range(10)]
    session.unavailable.pop("cpu", None)
    return session


def test_the_example_plugin_is_loaded_like_a_builtin(plugins):
    plugins(EX401="gpudoctor_example_check:run")
    checks, errors = registry.load_checks()
    assert not errors and "EX401" in {c.id for c in checks} and "GD102" in {c.id for c in checks}
    assert registry.find_check("host-memory").id == "EX401"
    report, _ = judge(_session(0.93))
    finding = next(f for f in report["findings"] if f["id"] == "EX401")
    assert finding["severity"] == "critical" and finding["stage"] == 4 and "93%" in finding["message"]
    assert "EX401" in report["docs"]
    quiet, _ = judge(_session(0.3))
    assert {"id": "EX401", "status": "pass"}.items() <= next(c for c in quiet["checks"] if c["id"] == "EX401").items()


def test_broken_plugins_become_error_outcomes_in_every_report(plugins):
    entries = {f"BAD{i:02d}": f"broken_plugins:{name}" for i, name in enumerate(
        ["RAISES", "RETURNS_NONE", "RETURNS_INTS", "ONE_FINDING", "BAD_EVIDENCE", "BAD_GAIN", "EXITS",
         "BAD_REMEDY", "BAD_STAGE", "NOT_A_CHECK", "BAD_REQUIRES"], start=1)}
    plugins(**entries, GOOD1="broken_plugins:GOOD", IMPORT="import_fails:CHECK", EXITING="exits_on_import:CHECK",
            MISSING="broken_plugins:NO_SUCH_NAME")
    report, _ = judge(_session(0.3))
    outcomes = {c["id"]: c for c in report["checks"]}
    assert outcomes["GOOD1"]["status"] == "finding"
    expected = {
        "BAD01": "ZeroDivisionError",
        "BAD02": "returned None, expected a list of Finding",
        "BAD03": "item 0 is a int",
        "BAD04": "returned one Finding",
        "BAD05": "cannot be written as JSON",
        "BAD06": "estimated_gain 'fast'",
        "BAD07": "SystemExit",
        "BAD08": "expected a gpudoctor.model.Remedy",
        "BAD09": "stage 42",
        "BAD10": "not a gpudoctor.model.Check",
        "BAD11": "requires must be a tuple of strings",
        "IMPORT": "needs a library that is not installed",
        "EXITING": "SystemExit",
        "MISSING": "AttributeError",
    }
    for check_id, words in expected.items():
        assert outcomes[check_id]["status"] == "error", check_id
        assert words in outcomes[check_id]["reason"], (check_id, outcomes[check_id]["reason"])
    assert all(f["id"] not in expected for f in report["findings"])
    assert any(c["id"] == "GD102" for c in report["checks"])  # the built-ins still ran
    for fmt in ("html", "json", "markdown", "junit", "terminal"):
        text = render(report, fmt)
        assert "BAD03" in text, fmt
    assert 'errors="14"' in render(report, "junit")


def test_a_broken_plugin_does_not_stop_diagnose_report(plugins, tmp_path, capsys):
    """`gpudoctor report SESSION` with a broken plugin installed: the report, with the error in it."""
    from gpudoctor import cli

    plugins(BAD01="broken_plugins:RAISES", IMPORT="import_fails:CHECK")
    path = tmp_path / "s.session.json"
    _session(0.3).save(path)
    code = cli.main(["report", str(path), "--out", str(tmp_path / "r"), "--format", "markdown"])
    assert code == 0
    markdown = (tmp_path / "r.md").read_text()
    assert "BAD01" in markdown and "IMPORT" in markdown and "plugin failed to load" in markdown


@pytest.mark.integration
def test_the_example_package_installs_with_pip_and_registers(tmp_path):
    target = tmp_path / "site"
    try:
        import setuptools  # noqa: F401  (builds the example without reaching the package index)
    except ImportError:
        pytest.skip("setuptools is not installed in this environment")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(EXAMPLE)], check=True, capture_output=True, timeout=300)
    env = dict(os.environ, PYTHONPATH=str(target) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    listed = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "checks", "--plain"],
        check=False,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "EX401\thost-memory\t4\tHost memory nearly full" in listed.stdout
    assert "failed to load" not in listed.stderr
    page = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "explain", "EX401"],
        check=False,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert page.returncode == 0 and "What to do" in page.stdout


# issue 27 items 3, 4, 5: a plugin never costs the report, never changes what it reports on

GUESTS = '''
import time
from gpudoctor.model import Check, Finding

class Odd(BaseException):
    pass

def _check(id, run):
    return Check(id=id, slug=id.lower(), stage=1, title=id, run=run)

def _hang(session):
    while True:
        time.sleep(0.05)

def _interrupt(session):
    raise KeyboardInterrupt

def _odd(session):
    raise Odd("a BaseException of its own")

def _mutate(session):
    session.exit_code = 139
    session.cpu_samples.clear()
    session.steps.records.clear()
    session.notes.append("written by a plugin")
    return [Finding(severity="info", title="mutated", message="m")]

HANGS = _check("HANG1", _hang)
INTERRUPTS = _check("INT01", _interrupt)
ODD = _check("ODD01", _odd)
MUTATES = _check("MUT01", _mutate)
'''


@pytest.fixture
def guests(plugins, tmp_path):
    (tmp_path / "guest_plugins.py").write_text(textwrap.dedent(GUESTS))
    (tmp_path / "odd_on_import.py").write_text("class Odd(BaseException):\n    pass\nraise Odd('at import')\n")
    (tmp_path / "interrupt_on_import.py").write_text("raise KeyboardInterrupt\n")
    yield plugins
    for name in ("guest_plugins", "odd_on_import", "interrupt_on_import"):
        sys.modules.pop(name, None)


def test_a_plugin_that_hangs_is_stopped_by_the_time_limit(guests, monkeypatch):
    from gpudoctor.verdict import engine

    monkeypatch.setattr(engine, "PLUGIN_TIME_LIMIT_S", 0.5, raising=False)
    guests(HANG1="guest_plugins:HANGS", EX401="gpudoctor_example_check:run")
    report, _ = judge(_session(0.93))
    outcomes = {c["id"]: c for c in report["checks"]}
    assert outcomes["HANG1"]["status"] == "error" and "did not finish within 0.5 s" in outcomes["HANG1"]["reason"]
    assert outcomes["EX401"]["status"] == "finding" and outcomes["GD102"]["status"] != "error"


def test_base_exceptions_and_keyboard_interrupts_of_plugins_are_their_errors(guests):
    guests(ODD01="guest_plugins:ODD", INT01="guest_plugins:INTERRUPTS", IMPORT1="odd_on_import:CHECK",
           IMPORT2="interrupt_on_import:CHECK", EX401="gpudoctor_example_check:run")
    _, errors = registry.load_checks()
    assert {e.name for e in errors} == {"IMPORT1", "IMPORT2"}
    assert "Odd: at import" in next(e.reason for e in errors if e.name == "IMPORT1")
    report, _ = judge(_session(0.93))
    outcomes = {c["id"]: c for c in report["checks"]}
    assert outcomes["ODD01"]["status"] == "error" and "Odd" in outcomes["ODD01"]["reason"]
    assert outcomes["INT01"]["status"] == "error" and "KeyboardInterrupt" in outcomes["INT01"]["reason"]
    assert outcomes["EX401"]["status"] == "finding"  # the checks after them still ran
    assert {"IMPORT1", "IMPORT2"} <= set(outcomes)


def test_a_keyboard_interrupt_while_judging_keeps_what_was_judged(guests, monkeypatch):
    """A real Ctrl-C (SIGINT to gpudoctor) while a plugin hangs: the report is still built."""
    import signal
    import threading

    from gpudoctor.verdict import engine

    monkeypatch.setattr(engine, "PLUGIN_TIME_LIMIT_S", 60.0, raising=False)
    guests(HANG1="guest_plugins:HANGS", MUT01="guest_plugins:MUTATES")
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        report, _ = judge(_session(0.93))
    finally:
        timer.cancel()
    outcomes = {c["id"]: c for c in report["checks"]}
    assert outcomes["HANG1"]["status"] == "error" and "interrupted" in outcomes["HANG1"]["reason"]
    assert outcomes["MUT01"]["status"] == "skipped" and "interrupted" in outcomes["MUT01"]["reason"]
    assert outcomes["GD102"]["status"] in ("finding", "pass", "skipped")  # judged before the Ctrl-C
    assert report["summary"]["verdict"]


def test_a_plugin_that_mutates_the_session_changes_nothing_reported(guests, tmp_path):
    from gpudoctor import cli

    guests(MUT01="guest_plugins:MUTATES")
    session = _session(0.3)
    session.exit_code = 0
    before = session.to_dict()
    report, _ = judge(session)
    assert session.to_dict() == before
    assert report["exit_code"] == 0 and "written by a plugin" not in str(report)
    assert next(c for c in report["checks"] if c["id"] == "MUT01")["status"] == "finding"
    path = tmp_path / "s.session.json"
    _session(0.3).save(path)
    saved = path.read_text()
    assert cli.main(["report", str(path), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    resaved = (tmp_path / "r.session.json").read_text()
    assert json.loads(resaved) == json.loads(saved)
