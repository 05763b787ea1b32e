"""gpudoctor: why is my GPU idle?

The public API for workloads is tiny and optional:

    import gpudoctor
    for batch in loader:
        ...
        gpudoctor.step()   # marks a step boundary; a no-op when not run under gpudoctor
"""

from __future__ import annotations

import sys

__version__ = "0.1.0"

__all__ = ["__version__", "step"]


def step() -> None:
    """Mark the end of one training/inference step (optional: optimizer steps and
    DataLoader batches are detected automatically). Does nothing outside gpudoctor."""
    agent = sys.modules.get("_gpudoctor_agent")
    if agent is not None:
        try:
            agent.step()
        except Exception:
            pass
