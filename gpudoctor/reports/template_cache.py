"""Compiled report templates kept between runs: jinja2's bytecode cache, in the user's cache directory.

Compiling report.html and the parts it includes takes about a tenth of a second, every run
(`gpudoctor analyze` waits for it); loading them compiled takes a few milliseconds. jinja2
keys each template by its file and rejects an entry whose source changed, or that another
Python wrote; the key here also holds what else shapes the compiled code (the jinja2
version, the environment's options and filter names), so a changed environment never reads
code compiled for another. A cache that cannot be made, read or written is no error: the
template is compiled, as without one.

The directory: ``$XDG_CACHE_HOME/gpudoctor/templates`` (``~/.cache/gpudoctor/templates``);
``GPUDOCTOR_NO_TEMPLATE_CACHE=1`` turns it off.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import jinja2
from jinja2.bccache import Bucket

log = logging.getLogger(__name__)

DISABLE_ENV = "GPUDOCTOR_NO_TEMPLATE_CACHE"


class TemplateCache(jinja2.FileSystemBytecodeCache):
    """jinja2's file cache, keyed by the environment too, and quiet when the disk is not there."""

    def __init__(self, directory: str, environment: jinja2.Environment) -> None:
        super().__init__(directory)
        self.salt = _fingerprint(environment)

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return hashlib.sha1(f"{self.salt}|{name}|{filename or ''}".encode()).hexdigest()

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception as exc:  # noqa: BLE001  (unreadable, truncated, garbled: compiled instead)
            log.debug("template cache not read: %s", exc)
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError as exc:
            log.debug("template cache not written: %s", exc)


def attach(environment: jinja2.Environment) -> None:
    """Give `environment` a TemplateCache, unless turned off or no cache directory can be made."""
    if os.environ.get(DISABLE_ENV):
        return
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    directory = Path(root) / "gpudoctor" / "templates"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except (OSError, RuntimeError) as exc:  # RuntimeError: no home directory
        log.debug("no template cache: %s", exc)
        return
    environment.bytecode_cache = TemplateCache(str(directory), environment)


def _fingerprint(environment: jinja2.Environment) -> str:
    """What the compiled code depends on besides the template's source: the jinja2 version,
    the environment's plain settings (delimiters, whitespace handling, autoescape, ...), its
    undefined type, extensions and filter and test names."""
    settings = sorted((key, value) for key, value in vars(environment).items()
                      if isinstance(value, (str, bool, int, float, type(None))))
    parts = (jinja2.__version__, repr(settings), environment.undefined.__qualname__,
             repr(sorted(environment.extensions)), repr(sorted(environment.filters)),
             repr(sorted(environment.tests)))
    return hashlib.sha1("|".join(parts).encode()).hexdigest()
