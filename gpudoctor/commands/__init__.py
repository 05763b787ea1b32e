"""One module per subcommand; each exposes ``register(subparsers)``.

COMMANDS lists every command with its module and the one line `gpudoctor --help` shows,
so the top-level parser is built without importing any command module: only the module
of the command being run is imported (its full options then, `gpudoctor CMD --help`
included). tests/test_cli_lazy.py checks the lines here against what the modules register.
"""

from __future__ import annotations

# command -> (module under gpudoctor.commands, help line); in the order --help lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "diagnose": ("diagnose", "run a PyTorch script/command and diagnose why its GPU idles"),
    "report": ("report", "re-run the checks on a saved session (or report) and render it"),
    "analyze": ("analyze", "diagnose from an existing torch.profiler trace (no run needed)"),
    "diff": ("diff", "compare two runs (before/after a change)"),
    "sweep": ("sweep", "measure throughput/latency vs batch size: the knee and the memory edge"),
    "checks": ("catalog", "list the checks (IDs, stages, titles)"),
    "explain": ("catalog", "print a check's documentation page"),
    "demo": ("demo", "diagnose a bundled example workload with an input-pipeline problem"),
    "preflight": ("preflight", "machine and job checklist before a run (CI gate)"),
    "attach": ("attach", "sample a running process's CPU and GPUs (no agent) and report"),
    "merge": ("merge", "merge the Sessions of one multi-node job (one per node) into one report"),
}
