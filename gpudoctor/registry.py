"""Find and load checks: built-in and third-party alike, through entry points.

Built-in checks are declared under the entry point group ``gpudoctor.checks`` in
pyproject.toml, the same way a plugin package declares its own. When gpudoctor runs
from a source tree without installed metadata, the built-in list is read from
``gpudoctor.checks.BUILTIN`` instead.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from gpudoctor.model import Check
from gpudoctor.plugins import check_problem

log = logging.getLogger(__name__)

GROUP = "gpudoctor.checks"


@dataclass(frozen=True)
class PluginError:
    name: str
    reason: str


def _builtin_checks(errors: list[PluginError]) -> list[Check]:
    from gpudoctor import checks as builtin

    loaded = []
    for module_name in builtin.BUILTIN:
        try:
            module = importlib.import_module(f"gpudoctor.checks.{module_name}")
            loaded.append(module.CHECK)
        except Exception as exc:  # reported like a broken plugin, never fatal
            errors.append(PluginError(module_name, f"{type(exc).__name__}: {exc}"))
    return loaded


def load_checks() -> tuple[list[Check], list[PluginError]]:
    """All checks, ordered by ID, plus the plugins that failed to load (with why)."""
    errors: list[PluginError] = []
    found: dict[str, Check] = {}
    eps = list(entry_points(group=GROUP))
    if not any(ep.value.startswith("gpudoctor.checks.") for ep in eps):
        # a source tree without installed metadata: find the built-ins by module name
        found = {c.id: c for c in _builtin_checks(errors)}
    for ep in eps:
        try:
            check = ep.load()
        except (Exception, SystemExit) as exc:  # noqa: BLE001  (a broken plugin must not break diagnosis)
            errors.append(PluginError(ep.name, f"{_origin(ep)}{type(exc).__name__}: {exc}"))
            continue
        problem = check_problem(check)
        if problem:
            errors.append(PluginError(ep.name, _origin(ep) + problem))
            continue
        if check.id in found and found[check.id] is not check:
            errors.append(PluginError(ep.name, f"check ID {check.id} is already taken"))
            continue
        found[check.id] = check
    return sorted(found.values(), key=lambda c: c.id), errors


def _origin(ep: EntryPoint) -> str:
    """ "package 1.2: " for a plugin's message, so the user knows what to fix or uninstall."""
    dist = getattr(ep, "dist", None)
    name = getattr(dist, "name", None) if dist is not None else None
    version = getattr(dist, "version", None) if dist is not None else None
    return f"{name} {version}: " if name else ""


def find_check(key: str) -> Check | None:
    """Look a check up by ID (GD102) or slug (input-stall), case-insensitively."""
    checks, _ = load_checks()
    key = key.strip().lower()
    for check in checks:
        if check.id.lower() == key or check.slug.lower() == key:
            return check
    return None
