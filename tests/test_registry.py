"""Checks are declared once and found by one mechanism; the engine knows no particular check.

- the built-ins are the modules of gpudoctor.checks, found by scanning the package: with
  no installed metadata at all (a plain checkout) and from a wheel (test_packaging.py);
- a check module imports no other check (shared analyses live in gpudoctor.analysis);
- the engine holds no check ID: what explains what is declared by the checks;
- each shared analysis runs once per Session, whichever checks read it;
- thresholds are numbers that carry their source, and `gpudoctor explain` prints them.
"""

from __future__ import annotations

import ast
import copy
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.analysis import shared
from gpudoctor.model import Check, Finding, check, thresholds_of
from gpudoctor.session import Session
from gpudoctor.thresholds import CountThreshold, Threshold
from gpudoctor.verdict import registry
from gpudoctor.verdict.engine import run_checks

ROOT = Path(__file__).resolve().parent.parent
CHECKS_DIR = ROOT / "gpudoctor" / "checks"
FIXTURES = ROOT / "tests" / "fixtures" / "h200"
CHECK_MODULES = sorted(p.stem for p in CHECKS_DIR.glob("*.py") if not p.stem.startswith("_"))


def test_every_check_module_is_found_without_any_entry_point(monkeypatch):
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    checks, errors = registry.load_checks()
    assert not errors
    assert len(checks) == len(CHECK_MODULES) == 22
    assert {c.run.__module__.rsplit(".", 1)[1] for c in checks} == set(CHECK_MODULES)
    # the ID is written once, in the declaration; the module name only has to start with it
    assert all(c.run.__module__.rsplit(".", 1)[1].startswith(c.id.lower()) for c in checks)


@pytest.mark.integration
def test_a_plain_checkout_finds_the_builtins_without_metadata(tmp_path):
    """`python -S`-like isolation is not possible with the dependencies in site-packages, so the
    subprocess hides every installed gpudoctor distribution's entry points instead."""
    code = (
        "import importlib.metadata as md; real = md.entry_points;"
        "md.entry_points = lambda **kw: [] if kw.get('group') == 'gpudoctor.checks' else real(**kw);"
        "from gpudoctor.verdict import registry; registry.entry_points = md.entry_points;"
        "checks, errors = registry.load_checks(); assert not errors, errors;"
        "import gpudoctor; print(gpudoctor.__file__); print(' '.join(c.id for c in checks))"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split("\n")
    assert Path(out[0]).resolve().is_relative_to(ROOT)
    assert out[1].split() == ["GD001", "GD002", "GD101", "GD102", "GD103", "GD104", "GD105", "GD201", "GD202", "GD203",
                              "GD301", "GD302", "GD303", "GD304", "GD305", "GD306", "GD401", "GD402", "GD501", "GD502",
                              "GD503", "GD504"]


def test_pyproject_lists_no_builtin_check():
    text = (ROOT / "pyproject.toml").read_text()
    assert "gpudoctor.checks." not in text and not re.search(r"^GD\d{3}\s*=", text, re.MULTILINE)


def test_stale_metadata_naming_the_builtins_is_ignored(monkeypatch):
    """An older install listed the built-ins as entry points: they are not loaded twice."""
    from importlib.metadata import EntryPoint

    stale = [EntryPoint(name="GD102", value="gpudoctor.checks.gd102_input_stall:CHECK", group=registry.GROUP)]
    monkeypatch.setattr(registry, "entry_points", lambda group: stale)
    checks, errors = registry.load_checks()
    assert not errors and [c.id for c in checks].count("GD102") == 1


@pytest.mark.parametrize("module", CHECK_MODULES)
def test_a_check_imports_no_other_check(module):
    tree = ast.parse((CHECKS_DIR / f"{module}.py").read_text())
    imported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            imported += [base] + [f"{base}.{a.name}" for a in node.names]
    others = [name for name in imported
              if re.match(r"gpudoctor\.checks\.[a-z]", name) or (name == "gpudoctor.checks")]
    assert not others, f"{module} imports {others}"


def test_the_engine_names_no_check():
    tree = ast.parse((ROOT / "gpudoctor" / "verdict" / "engine.py").read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    named = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and id(n) not in docstrings and re.search(r"\bGD\d{3}\b", n.value)]
    assert not named


def test_each_shared_analysis_runs_once_per_session(monkeypatch):
    calls = {"input_stall": 0, "gpu_activity": 0, "fully_used": 0, "oom_facts": 0}

    def counting(name, real):
        def wrapper(session):
            calls[name] += 1
            return real(session)
        return wrapper

    for name in calls:
        monkeypatch.setattr(shared, name, counting(name, getattr(shared, name)))
    checks, _ = registry.load_checks()
    session = Session.load(FIXTURES / "starved_loader.session.json")
    result = run_checks(session, checks)
    # GD101 and GD102 predict the same change (more workers) within 10%: the owner of the knob leads
    assert [f.id for f in result.findings][:2] == ["GD101", "GD102"]
    # GD101, GD102, GD103 (twice) and GD104 read the stall; GD201 and GD202 the activity
    assert calls == {"input_stall": 1, "gpu_activity": 1, "fully_used": 1, "oom_facts": 1}
    # outside an engine run a check gets fresh analyses: a Session changed between calls is not read stale
    assert shared.analyses(session) is not shared.analyses(session)


def test_a_condition_on_explains_is_declared_by_the_check():
    from gpudoctor.checks import gd102_input_stall

    declared = gd102_input_stall.run.check
    assert "GD103" in declared.explains and "GD103" in declared.explains_only_if
    from gpudoctor.model import Evidence

    main = Finding(severity="warning", title="t", message="m", evidence={"saturation": Evidence("main-thread")})
    cores = Finding(severity="warning", title="t", message="m", evidence={"saturation": Evidence("cores")})
    assert declared.explains_only_if["GD103"](main) and not declared.explains_only_if["GD103"](cores)


def test_thresholds_are_numbers_with_their_source():
    share = Threshold("data wait worth a finding", 0.05, "share", "TensorBoard profiler plugin")
    count = CountThreshold("small copy", 64 * 1024, "bytes", "Nsight Systems")
    assert share == 0.05 and share < 0.2 and share * 100 == 5.0 and f"{share:.0%}" == "5%"
    assert count == 65536 and f"{count}" == "65536" and count.shown() == "64 KiB"
    assert share.shown() == "5%"
    for thing in (share, count):
        for again in (copy.deepcopy(thing), pickle.loads(pickle.dumps(thing))):
            assert again == thing and again.source == thing.source and type(again) is type(thing)


def test_explain_prints_the_thresholds_the_code_uses(capsys):
    from gpudoctor import cli
    from gpudoctor.checks import gd104_storage

    assert cli.main(["explain", "GD104"]) == 0
    page = capsys.readouterr().out
    assert "Thresholds in force" in page
    latency = gd104_storage.SLOW_LATENCY_MS
    assert f"{latency.name}: **{latency.shown()}** ({latency.source})" in page
    assert gd104_storage.SLOW_LATENCY_MS in thresholds_of(gd104_storage.run.check)


def test_the_decorator_declares_once_and_keeps_the_function(monkeypatch):
    limit = Threshold("a limit", 2.0, "x", "a test")

    @check("ZZ901", "decorated", stage=2, title="Declared once", requires=("gpu",), explains=("GD201",),
           thresholds=(limit,))
    def run(session: Session) -> list[Finding]:
        return []

    declared = run.check
    assert isinstance(declared, Check) and declared.run is run and run(None) == []
    assert (declared.id, declared.slug, declared.stage, declared.requires, declared.explains) == (
        "ZZ901", "decorated", 2, ("gpu",), ("GD201",))
    assert declared.doc == (sys.modules[__name__].__doc__ or "")
    assert thresholds_of(declared)[0] is limit


def test_every_page_states_the_numbers_of_the_thresholds_it_names():
    """A page writes {{NAME}} where it states a threshold: filled from the object the code uses."""
    from gpudoctor.checks import gd104_storage, gd201_gpu_idle

    checks, _ = registry.load_checks()
    for declared in checks:
        assert not re.findall(r"\{\{\w+\}\}", declared.doc), declared.id
    assert f"Median read latency >= {gd104_storage.SLOW_LATENCY_MS.shown()}:" in gd104_storage.run.check.doc
    assert "Median read latency >= 5 ms:" in gd104_storage.run.check.doc
    assert "{{SLOW_LATENCY_MS}}" in (gd104_storage.__doc__ or "")  # the source names it, once
    assert f"busy share < {gd201_gpu_idle.BUSY_CRITICAL.shown()}: critical" in gd201_gpu_idle.run.check.doc


# ---- entry points without importlib.metadata where no distribution declares one ----------------

PLUGIN_MODULE = '''
from gpudoctor.model import Finding, check

@check("ZZ801", "from-a-dist-info", stage=2, title="Declared by an installed distribution")
def run(session):
    return []
'''


def _distribution(site: Path, name: str, entry_points: str | None, info: str = "dist-info") -> None:
    folder = site / f"{name}-1.2.{info}"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2\n")
    if entry_points is not None:
        (folder / "entry_points.txt").write_text(entry_points)


def _no_metadata(monkeypatch):
    """importlib.metadata's entry points fail the test if they are read."""
    import importlib.metadata

    def refused(**kw):
        raise AssertionError(f"importlib.metadata.entry_points{kw} was read")

    monkeypatch.setattr(importlib.metadata, "entry_points", refused)


def test_a_plugin_installed_as_a_dist_info_is_found(monkeypatch, tmp_path):
    """The real lookup (no fake entry points): a distribution on sys.path declaring the group."""
    _distribution(tmp_path, "zz_plugin", "[console_scripts]\nzz = zz_plugin:main\n\n"
                                         "[gpudoctor.checks]\nZZ801 = zz_plugin_check:run\n")
    _distribution(tmp_path, "unrelated", "[console_scripts]\nun = unrelated:main\n")
    (tmp_path / "zz_plugin_check.py").write_text(PLUGIN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "zz_plugin_check", raising=False)
    try:
        found = registry.entry_points(group=registry.GROUP)
        assert [(ep.name, ep.value) for ep in found] == [("ZZ801", "zz_plugin_check:run")]
        checks, errors = registry.load_checks()
        assert not errors
        assert [c.id for c in checks].count("ZZ801") == 1 and {"GD101", "GD504"} <= {c.id for c in checks}
        assert registry.find_check("from-a-dist-info").title == "Declared by an installed distribution"
    finally:
        sys.modules.pop("zz_plugin_check", None)


def test_a_broken_plugin_from_a_dist_info_is_named_with_its_distribution(monkeypatch, tmp_path):
    _distribution(tmp_path, "zz_broken", "[gpudoctor.checks]\nZZ802 = zz_no_such_module:run\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _, errors = registry.load_checks()
    assert [(e.name, e.reason.split(": ")[0]) for e in errors] == [("ZZ802", "zz_broken 1.2")]
    assert "ModuleNotFoundError" in errors[0].reason


def test_without_a_declaring_distribution_importlib_metadata_is_not_read(monkeypatch, tmp_path):
    _distribution(tmp_path, "tool", "[console_scripts]\ntool = tool:main\n")
    _distribution(tmp_path, "plain", None)
    _distribution(tmp_path, "old_style", "[console_scripts]\nold = old_style:main\n", info="egg-info")
    (tmp_path / "single_file.egg-info").write_text("Metadata-Version: 1.0\nName: single-file\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), "a path hook's key", str(tmp_path)])
    assert not registry._may_declare(registry.GROUP)
    _no_metadata(monkeypatch)
    assert registry.entry_points(group=registry.GROUP) == []


def test_a_mention_of_the_group_is_not_a_declaration(monkeypatch, tmp_path):
    """The lookup reads bytes, not sections: a file naming the group in another way sends it to
    importlib.metadata, which finds no entry point of the group there."""
    _distribution(tmp_path, "near_miss", "[gpudoctor.checksum]\nZZ805 = near:run\n"
                                         "[console_scripts]\nx = gpudoctor.checks_tool:main\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert registry._may_declare(registry.GROUP)
    assert registry.entry_points(group=registry.GROUP) == []


@pytest.mark.parametrize("where", ["egg", "egg-info", "zip", "finder"])
def test_where_a_plugin_may_hide_importlib_metadata_looks(monkeypatch, tmp_path, where):
    """An egg's EGG-INFO and an *.egg-info folder are read directly; a zip archive on the path or
    a finder listing distributions its own way is left to importlib.metadata (it is asked)."""
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert not registry._may_declare(registry.GROUP)
    if where == "egg":
        egg = tmp_path / "zz_egg-1.2-py3.11.egg"
        (egg / "EGG-INFO").mkdir(parents=True)
        (egg / "EGG-INFO" / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: zz-egg\nVersion: 1.2\n")
        (egg / "EGG-INFO" / "entry_points.txt").write_text("[gpudoctor.checks]\nZZ803 = zz_egg:run\n")
        sys.path.append(str(egg))
    elif where == "egg-info":
        _distribution(tmp_path, "zz_legacy", "[gpudoctor.checks]\nZZ804 = zz_legacy:run\n", info="egg-info")
    elif where == "zip":
        archive = tmp_path / "bundle.zip"
        archive.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip archive
        sys.path.append(str(archive))
    if where in ("egg", "egg-info"):  # where importlib.metadata finds one too
        from importlib.metadata import entry_points

        assert [ep.name for ep in entry_points(group=registry.GROUP)] == ["ZZ803" if where == "egg" else "ZZ804"]
    if where == "finder":
        class Finder:
            @staticmethod
            def find_spec(*args):
                return None

            @staticmethod
            def find_distributions(*args, **kwargs):
                return iter(())

        monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder])
    assert registry._may_declare(registry.GROUP)


def test_the_lookup_agrees_with_importlib_metadata_here():
    """In this environment (whatever plugins it holds), the same entry points as importlib.metadata's."""
    from importlib.metadata import entry_points

    expected = [(ep.name, ep.value) for ep in entry_points(group=registry.GROUP)]
    assert [(ep.name, ep.value) for ep in registry.entry_points(group=registry.GROUP)] == expected
    if expected:
        assert registry._may_declare(registry.GROUP)
