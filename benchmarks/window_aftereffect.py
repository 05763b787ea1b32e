"""Does a torch.profiler window slow the run after it closes? Runs a script with one window.

The script runs unchanged (runpy) in this process; an optimizer step post-hook opens a
torch.profiler window at step ``--at`` and closes it ``--steps`` steps later, with the
options given, the way gpudoctor's agent does. Compare the script's own throughput with
a plain run of it (``--variant none``): a window costs its own steps and nothing after.

    python benchmarks/window_aftereffect.py --variant stack -- tests/workloads/gpu/loader_reiter.py
"""

from __future__ import annotations

import argparse
import runpy
import sys
import tempfile
import time

VARIANTS = ("none", "stack", "nostack", "cpu", "noexport", "stall")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=VARIANTS, default="stack")
    parser.add_argument("--at", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("script", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    script = [a for a in args.script if a != "--"]
    if args.variant != "none":
        _install(args)
    sys.argv = script
    runpy.run_path(script[0], run_name="__main__")


def _install(args: argparse.Namespace) -> None:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerActivity, profile

    state = {"n": 0, "prof": None}

    def hook(optimizer, a, kw) -> None:  # type: ignore[no-untyped-def]
        state["n"] += 1
        n = state["n"]
        if n == args.at and args.variant == "stall":  # no profiler: the host stops as long as a window's end does
            torch.cuda.synchronize()
            time.sleep(0.8)
        elif n == args.at:
            activities = [ProfilerActivity.CPU]
            if args.variant != "cpu" and torch.cuda.is_initialized():
                activities.append(ProfilerActivity.CUDA)
            prof = profile(activities=activities, record_shapes=False, with_stack=args.variant != "nostack")
            prof.start()
            state["prof"] = prof
        elif n == args.at + args.steps and state["prof"] is not None:
            t0 = time.perf_counter()
            prof = state["prof"]
            state["prof"] = None
            prof.stop()
            if args.variant != "noexport":
                with tempfile.NamedTemporaryFile(suffix=".json") as fh:
                    prof.export_chrome_trace(fh.name)
            print("window closed in %.3f s" % (time.perf_counter() - t0), file=sys.stderr)

    register_optimizer_step_post_hook(hook)


if __name__ == "__main__":
    main()
