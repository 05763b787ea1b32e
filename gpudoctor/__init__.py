"""gpudoctor: why is my GPU idle?

The public API for workloads is tiny and optional:

    import gpudoctor
    for batch in loader:
        ...
        gpudoctor.step()   # marks a step boundary; a no-op when not run under gpudoctor

and, to diagnose a loop in this very process (a notebook, a script of one's own):

    with gpudoctor.watch("train", out="reports/") as w:
        ...
    w.report()             # the report (displays inline in Jupyter)
    gpudoctor.diagnose_fn(train_step, batch, steps=50)

`import gpudoctor` stays cheap: watch, diagnose_fn and Report are imported on first use.
"""

from __future__ import annotations

import sys

__version__ = "0.1.0"

__all__ = ["Report", "Watch", "__version__", "diagnose_fn", "step", "watch"]

_LAZY = {
    "watch": "gpudoctor.inprocess.watch",
    "diagnose_fn": "gpudoctor.inprocess.watch",
    "Watch": "gpudoctor.inprocess.watch",
    "Report": "gpudoctor.inprocess.result",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpudoctor' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def step() -> None:
    """Mark the end of one training/inference step (optional: optimizer steps and
    DataLoader batches are detected automatically). Does nothing outside gpudoctor."""
    # the agent of a `diagnose` run, else the one a watch() installed in this process
    for name in ("_gpudoctor_agent", "gpudoctor.agent"):
        agent = sys.modules.get(name)
        if agent is not None and getattr(agent, "_AGENT", None) is not None:
            try:
                agent.step()
            except Exception:  # noqa: BLE001  (gpudoctor's own failure never reaches the user's loop)
                pass
            return
