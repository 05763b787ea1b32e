"""Find and load checks: the built-ins by scanning their package, plugins through entry points.

Every module of ``gpudoctor.checks`` whose name does not start with ``_`` holds one
check, declared once (``@check(...)`` on its function, or a module-level
``CHECK = Check(...)``). The package is scanned, not listed, so a wheel, an editable
install and a plain checkout without installed metadata all find the same built-ins.
Third-party checks register under the entry point group ``gpudoctor.checks``
(docs/plugins.md) and are loaded, validated and reported on failure the same way:
a broken built-in is an error outcome like a broken plugin, never a crash.

Importing importlib.metadata (it pulls in the email package) took a tenth of
`gpudoctor checks`; it is imported only when some installed distribution's
``entry_points.txt`` names the group, found by reading those files directly.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import sys
from dataclasses import dataclass
from importlib.machinery import PathFinder
from types import ModuleType
from typing import TYPE_CHECKING

from gpudoctor.model import Check, declared_check
from gpudoctor.verdict.plugins import check_problem

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

log = logging.getLogger(__name__)

GROUP = "gpudoctor.checks"


@dataclass(frozen=True)
class PluginError:
    name: str
    reason: str


def module_check(module: ModuleType) -> Check | None:
    """The check a module declares: its ``CHECK``, or the function ``@check`` marked."""
    found = declared_check(getattr(module, "CHECK", None))
    if found is not None:
        return found
    for value in vars(module).values():
        found = declared_check(value)
        if found is not None and getattr(found.run, "__module__", None) == module.__name__:
            return found
    return None


def builtin_module_names() -> list[str]:
    """The modules of gpudoctor.checks that hold a check (helpers start with ``_``)."""
    from gpudoctor import checks as package

    return sorted(info.name for info in pkgutil.iter_modules(package.__path__)
                  if not info.name.startswith("_") and not info.ispkg)


def _builtin_checks(errors: list[PluginError]) -> list[Check]:
    loaded = []
    for name in builtin_module_names():
        try:
            found = module_check(importlib.import_module(f"gpudoctor.checks.{name}"))
        except BaseException as exc:  # noqa: BLE001  (reported like a broken plugin, never fatal)
            errors.append(PluginError(name, f"{type(exc).__name__}: {exc}"))
            continue
        problem = check_problem(found) if found is not None else "the module declares no check"
        if problem:
            errors.append(PluginError(name, problem))
            continue
        assert found is not None
        loaded.append(found)
    return loaded


def load_checks() -> tuple[list[Check], list[PluginError]]:
    """All checks, ordered by ID, plus the checks that failed to load (with why)."""
    errors: list[PluginError] = []
    found: dict[str, Check] = {}
    for builtin in _builtin_checks(errors):
        if builtin.id in found:
            errors.append(PluginError(builtin.id, f"check ID {builtin.id} is declared twice"))
            continue
        found[builtin.id] = builtin
    for ep in entry_points(group=GROUP):
        if ep.value.startswith("gpudoctor.checks."):
            continue  # an old install's metadata listing the built-ins: already found by the scan
        try:
            loaded = ep.load()
        except BaseException as exc:  # noqa: BLE001  (a broken plugin must not break diagnosis, whatever it raises)
            errors.append(PluginError(ep.name, f"{_origin(ep)}{type(exc).__name__}: {exc}"))
            continue
        check = declared_check(loaded) or loaded
        problem = check_problem(check)
        if problem:
            errors.append(PluginError(ep.name, _origin(ep) + problem))
            continue
        if check.id in found and found[check.id] is not check:
            errors.append(PluginError(ep.name, f"check ID {check.id} is already taken"))
            continue
        found[check.id] = check
    return sorted(found.values(), key=lambda c: c.id), errors


def entry_points(group: str) -> list[EntryPoint]:
    """The installed entry points of `group` (importlib.metadata's, in its order); none, without
    importing importlib.metadata, when no distribution on the path can declare one."""
    if not _may_declare(group):
        return []
    from importlib.metadata import entry_points as installed

    return list(installed(group=group))


def _may_declare(group: str) -> bool:
    """Whether importlib.metadata could find an entry point of `group`: some distribution's
    entry_points.txt (where importlib.metadata looks for one: the *.dist-info and *.egg-info
    folders, and an egg's EGG-INFO, of every directory on sys.path) mentions the group's name.
    Where distributions are not plain folders (a zip archive on the path, a finder of its
    own in sys.meta_path), it answers yes and importlib.metadata looks itself."""
    if any(finder is not PathFinder and hasattr(finder, "find_distributions") for finder in sys.meta_path):
        return True
    needle = group.encode()
    for entry in sys.path:
        if not isinstance(entry, str):
            return True
        root = entry or "."
        try:
            names = os.listdir(root)
        except NotADirectoryError:  # a zip archive: distributions may be inside
            return True
        except (OSError, ValueError):  # not there, not readable, or not a path (a path hook's key)
            continue
        for name in names:
            if not name.lower().endswith(("dist-info", "egg-info")):  # an egg's own is EGG-INFO
                continue
            try:
                with open(os.path.join(root, name, "entry_points.txt"), "rb") as fh:
                    if needle in fh.read():
                        return True
            except OSError:  # none (most distributions), or a single-file egg-info
                continue
    return False


def _origin(ep: EntryPoint) -> str:
    """ "package 1.2: " for a plugin's message, so the user knows what to fix or uninstall."""
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) if dist is not None else None
    version = getattr(dist, "version", None) if dist is not None else None
    return f"{name} {version}: " if name else ""


def checks_by_id() -> dict[str, Check]:
    """The installed checks by ID, for their declarations (what each explains, how its remedy
    is tried); empty when they cannot be loaded: a declaration is never worth a crash."""
    try:
        checks, _ = load_checks()
    except Exception:  # noqa: BLE001  (a broken plugin must not break what reads declarations)
        return {}
    return {c.id: c for c in checks}


def find_check(key: str) -> Check | None:
    """Look a check up by ID (GD102) or slug (input-stall), case-insensitively."""
    checks, _ = load_checks()
    key = key.strip().lower()
    for check in checks:
        if check.id.lower() == key or check.slug.lower() == key:
            return check
    return None
