"""Loaded by Python at start-up in every process of a `gpudoctor diagnose` run.

gpudoctor puts this folder first on PYTHONPATH. It starts the agent (loaded from
its own file path, so nothing else of gpudoctor or its environment leaks onto the
workload's sys.path), then hands over to whichever sitecustomize the workload
would have loaded without us. Nothing here may raise or print.
"""

import os
import sys


def _start_gpudoctor_agent() -> None:
    if not os.environ.get("GPUDOCTOR_SESSION_DIR"):
        return
    try:
        import importlib.util

        here = os.path.dirname(os.path.abspath(__file__))
        agent_dir = os.path.dirname(here)
        spec = importlib.util.spec_from_file_location(
            "_gpudoctor_agent",
            os.path.join(agent_dir, "__init__.py"),
            submodule_search_locations=[agent_dir],
        )
        assert spec is not None and spec.loader is not None  # a .py path always has a source loader
        module = importlib.util.module_from_spec(spec)
        sys.modules["_gpudoctor_agent"] = module
        spec.loader.exec_module(module)
        module.start()
    except Exception:  # noqa: BLE001 (the agent never stops the workload from starting)
        pass  # the workload runs as if gpudoctor were not there


def _chain_next_sitecustomize() -> None:
    """Run the sitecustomize that the workload's own sys.path would have found."""
    try:
        import importlib.machinery
        import importlib.util

        here = os.path.dirname(os.path.abspath(__file__))
        path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 (the user's own sitecustomize: printed, as Python would)
        import traceback

        traceback.print_exc()  # the user's own sitecustomize failed: show it as Python would


_start_gpudoctor_agent()
_chain_next_sitecustomize()
