"""The package's layers, enforced (docs/architecture.md, "Layer rules"; `make lint` runs this).

Every `import` of a gpudoctor module is read with `ast`, wherever it stands (module level,
inside a function, under `if TYPE_CHECKING:`), and held against two rules:

1. A module imports only from its own layer or the layers below it. Top to bottom:
   commands -> pipeline -> judging -> analysis -> replay -> collectors -> renderers ->
   session model -> foundation. (analysis, replay and collectors are the one layer
   "collectors | analysis | replay" of the design; inside it an analysis may ask the
   replay for a prediction, and the replay reads the collectors' decoded traces.)
2. The renderers (gpudoctor.reports) read only the Report: the report models, the text
   utilities and one another, never the Session, the collectors, the engine or the checks.

An exception is one (importer, imported) pair below, each with why it is there and what
removes it. A new upward import fails this test; fix it by moving the shared thing down to
the layer that owns it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpudoctor"

# (layer name, module prefixes), top to bottom; a module belongs to its longest matching prefix
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("commands", ("gpudoctor.cli", "gpudoctor.__main__", "gpudoctor.commands", "gpudoctor.inprocess",
                  "gpudoctor.integrations")),
    ("pipeline", ("gpudoctor.pipeline", "gpudoctor.run", "gpudoctor.verdict.judge", "gpudoctor.verdict.output",
                  "gpudoctor.trials", "gpudoctor.diff", "gpudoctor.sweep", "gpudoctor.preflight", "gpudoctor.demo",
                  "gpudoctor.agent")),
    ("judging", ("gpudoctor.verdict", "gpudoctor.checks", "gpudoctor.trials.report")),
    ("analysis", ("gpudoctor.analysis",)),
    ("replay", ("gpudoctor.replay",)),
    ("collectors", ("gpudoctor.collectors",)),
    ("renderers", ("gpudoctor.reports",)),
    ("session model", ("gpudoctor.session", "gpudoctor.model", "gpudoctor.metrics", "gpudoctor.trials.records",
                       "gpudoctor.verdict.report_model", "gpudoctor.diff.diff_model", "gpudoctor.diff.diff_stats",
                       "gpudoctor.sweep.sweep_model", "gpudoctor.schemas")),
    ("foundation", ("gpudoctor", "gpudoctor.base", "gpudoctor.thresholds", "gpudoctor.agent.protocol",
                    "gpudoctor.agent.redact")),
]

# what a renderer may import besides gpudoctor.reports itself: the Report and its vocabulary
RENDERER_READS = ("gpudoctor.verdict.report_model", "gpudoctor.diff.diff_model", "gpudoctor.sweep.sweep_model",
                  "gpudoctor.model", "gpudoctor.base.jsonmodel", "gpudoctor.base.text", "gpudoctor.base.idle_causes",
                  "gpudoctor.agent.redact")

# (importer, imported): the known exceptions, each a larger move than the layer fix it blocks,
# with why it is there and what removes it. None today: the last three (the Prediction type,
# the window's replay, the picture's range) were moved to the layers that own them.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The gpudoctor modules `name` imports (a name imported from a package counts as the
    submodule when there is one, else as the package)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                out.add(target)
    return out


def _layer(name: str) -> int:
    best, index = "", len(LAYERS)
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
                best, index = prefix, i
    return index


def violations() -> list[str]:
    modules = _modules()
    found = []
    for name, path in sorted(modules.items()):
        for target in sorted(_imports(name, path, modules)):
            if (name, target) in EXCEPTIONS:
                continue
            if _layer(target) < _layer(name):
                found.append(f"{name} ({LAYERS[_layer(name)][0]}) imports {target} ({LAYERS[_layer(target)][0]})")
            elif LAYERS[_layer(name)][0] == "renderers" and not target.startswith("gpudoctor.reports") \
                    and not target.startswith(RENDERER_READS):
                found.append(f"{name} (a renderer) imports {target}: renderers read only the Report")
    return found


def test_every_module_has_a_layer() -> None:
    assert [name for name in _modules() if _layer(name) == len(LAYERS)] == []


def test_no_upward_imports() -> None:
    assert violations() == []


def test_each_exception_is_still_needed() -> None:
    modules = _modules()
    for importer, imported in sorted(EXCEPTIONS):
        assert imported in _imports(importer, modules[importer], modules), \
            f"{(importer, imported)}: no longer imported; remove it"
