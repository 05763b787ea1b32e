"""The compiled templates kept between runs: the same page, a key per environment, never an error."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from synthetic import make_report

from gpudoctor.reports import html, template_cache
from gpudoctor.verdict.report_model import as_report


def _environment(cache: Path | None, **options: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(html.TEMPLATES)), autoescape=True,
                             undefined=jinja2.ChainableUndefined, **options)
    env.filters.update(html.environment().filters)
    if cache is not None:
        env.bytecode_cache = template_cache.TemplateCache(str(cache), env)
    return env


def _page(env: jinja2.Environment) -> str:
    report = html.printable_report(as_report(make_report()))
    return env.get_template("report.html").render(**html.context(report))


def test_a_page_from_cached_code_is_the_page_compiled_now(tmp_path: Path) -> None:
    options = {"trim_blocks": True, "lstrip_blocks": True}
    compiled = _page(_environment(None, **options))
    assert _page(_environment(tmp_path, **options)) == compiled  # compiled, then written
    assert list(tmp_path.iterdir())
    loaded = _environment(tmp_path, **options)
    bucket = loaded.bytecode_cache.get_bucket(loaded, "report.html", str(html.TEMPLATES / "report.html"),  # type: ignore[union-attr]
                                              (html.TEMPLATES / "report.html").read_text(encoding="utf-8"))
    assert bucket.code is not None  # the next run reads it
    assert _page(loaded) == compiled


def test_another_environment_never_reads_code_compiled_for_this_one(tmp_path: Path) -> None:
    trimmed = template_cache.TemplateCache(str(tmp_path), _environment(None, trim_blocks=True))
    kept = template_cache.TemplateCache(str(tmp_path), _environment(None, trim_blocks=False))
    assert trimmed.get_cache_key("report.html", "f") != kept.get_cache_key("report.html", "f")
    same = template_cache.TemplateCache(str(tmp_path), _environment(None, trim_blocks=True))
    assert trimmed.get_cache_key("report.html", "f") == same.get_cache_key("report.html", "f")


def test_a_cache_that_cannot_be_written_or_read_is_no_error(tmp_path: Path) -> None:
    missing = tmp_path / "gone"  # never made: nothing can be written there
    env = _environment(missing, trim_blocks=True, lstrip_blocks=True)
    assert "<html" in _page(env)
    assert not missing.exists()
    env = _environment(tmp_path, trim_blocks=True, lstrip_blocks=True)
    _page(env)
    for entry in tmp_path.iterdir():  # truncated entries: compiled again
        entry.write_bytes(entry.read_bytes()[:40])
    assert _page(_environment(tmp_path, trim_blocks=True, lstrip_blocks=True)) == _page(env)


def test_attach_follows_xdg_cache_home_and_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = _environment(None)
    template_cache.attach(env)
    assert isinstance(env.bytecode_cache, template_cache.TemplateCache)
    assert (tmp_path / "gpudoctor" / "templates").is_dir()
    monkeypatch.setenv(template_cache.DISABLE_ENV, "1")
    env = _environment(None)
    template_cache.attach(env)
    assert env.bytecode_cache is None
