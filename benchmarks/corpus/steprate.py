"""Run a workload script unchanged and record when each of its steps ended.

    python benchmarks/corpus/steprate.py OUT.json SCRIPT [ARGS...]

A step is an optimizer.step() (a post-hook), or, in a script that never steps an
optimizer, an outermost module forward (global forward hooks, counting depth per
thread). Each step is stamped with whether torch.profiler was on when it ended, so a
benchmark can tell the steps a profiler window overlapped from the others. The hooks
run alike in a plain run and under gpudoctor: what they cost is the same on both
sides of a comparison. Under torchrun each rank writes OUT.json.rank<N>.

STEPRATE_MAX_STEPS and STEPRATE_MAX_S (optional) bound a run that would go on for epochs:
after that many steps, or at the first step that ends that many seconds after the first step
(the script's set-up is not counted), the stamps are written and the process exits at once
with status 0 (DataLoader workers notice their parent is gone and end).

Host stamps alone overstate the rate of a loop that never waits for the GPU (pinned
non-blocking copies, CUDA graphs): until CUDA's launch queue fills, the host runs hundreds
of steps ahead of the device. With STEPRATE_SYNC_SHARE=S (run.py sets its warm-up share) the
process waits for the GPU twice: at the first step past S of either bound (S x
STEPRATE_MAX_STEPS steps, S x STEPRATE_MAX_S seconds), and when a bound ends the run. Both
moments go to the output as `synced` ([steps stamped by then, time after the wait]): between
them the device finished exactly the steps stamped, whatever the queue held. Two waits a run
cost a loop one drained queue each, alike in every run compared.

A script that ends on its own before the first of those waits (a test workload of 40 steps)
gets none: its host stamps are only how fast it queued (on an H200, 40 fp32 steps of 8192-wide
matmuls "ran" at 700-990 steps/s, about ten times what the device did). So a CUDA event is
also recorded at the 1st, 2nd, 4th, 8th ... stamp (a handful a run, so nothing per step), and
at the end the GPU time between them goes to the output as `events` ([steps stamped by then,
milliseconds since the first event]): the device's own clock for a script that never reached a
bound. Not while a stream captures a CUDA graph (an event cannot be recorded there).

Each fork of the process (a DataLoader starting its workers) is timed in the parent, from the
first at-fork handler to the last (those of anything registered before this harness, gpudoctor's
agent included, run inside that span), and the output ends with what the process held at its end:
its thread count and whether CUPTI's library was loaded. A run that slowed down after a profiler
window can then be told apart: forks that grew slower, a thread that never ended, CUPTI left in.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
import time
from typing import Any

LEARN = 3  # depth-0 calls of one module before it is taken as the outermost one


def forward_hooks(module, stamp, stamps, calls):  # type: ignore[no-untyped-def]
    """Hooks stamping each outermost module forward; their handles (a list the hooks keep current).

    Global hooks learn the outermost module, then give way to one hook on it alone: a global hook
    puts every module call on torch's hooked path (about 1.7 us a call on a CPU, over 250 calls a
    forward of a ViT-S), a cost that diagnose, which drops its global hooks once it knows the root,
    does not have, and that a host-bound small batch pays in full while a GPU-bound large one hides
    it under the GPU's time: it made the baseline slower than diagnosed and the batch remedy's
    realized gain bigger than the batch alone buys."""
    depth = threading.local()
    # the outermost module, learnt by depth: once one module has been called at depth 0 on one
    # thread LEARN times, each call of that module on that thread is a step (its own hook), and
    # the depth count is dropped with the global hooks
    learnt: dict[tuple[int, int], int] = {}
    root: list[tuple[int, int]] = []
    # under torch.compile the hooks of the modules inside a compiled module are traced: they
    # do nothing there (the compiled module's own call, in eager, is the one counted), else
    # Dynamo breaks the graph at each module and recompiles per module until its limit
    import torch

    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    def pre(mod, args) -> None:  # type: ignore[no-untyped-def]
        if compiling():
            return
        calls[0] += 1
        key = (id(mod), threading.get_ident())
        if root:  # a call already under way when the global hooks gave way
            return
        n = getattr(depth, "n", 0)
        depth.n = n + 1
        if n == 0:
            learnt[key] = learnt.get(key, 0) + 1
            if learnt[key] >= LEARN:
                root.append(key)
                only_the_root(mod)
            if not any(kind == "optimizer" for _, _, kind in stamps[-1:]):
                stamp("forward")

    def root_pre(mod, args) -> None:  # type: ignore[no-untyped-def]
        if compiling() or threading.get_ident() != root[0][1]:
            return
        calls[0] += 1
        if not any(kind == "optimizer" for _, _, kind in stamps[-1:]):
            stamp("forward")

    def only_the_root(mod) -> None:  # type: ignore[no-untyped-def]
        for handle in handles:
            handle.remove()
        handles[:] = [mod.register_forward_pre_hook(root_pre)]

    def post(mod, args, output) -> None:  # type: ignore[no-untyped-def]
        if compiling():
            return
        calls[1] += 1
        if not root:
            depth.n = max(0, getattr(depth, "n", 1) - 1)

    handles = [module.register_module_forward_pre_hook(pre), module.register_module_forward_hook(post)]
    return handles


class Forks:
    """Each fork's span in the parent: [when it began after the first step, milliseconds]."""

    def __init__(self) -> None:
        self.spans: list[list[float]] = []
        self.began: float | None = None

    def install(self) -> None:
        try:
            os.register_at_fork(before=self.before, after_in_parent=self.after)
        except (AttributeError, ValueError):  # no fork on this platform
            pass

    def before(self) -> None:
        self.began = time.perf_counter()

    def after(self) -> None:
        if self.began is not None:
            self.spans.append([self.began, (time.perf_counter() - self.began) * 1e3])
            self.began = None


def held_at_end() -> dict[str, Any]:
    """The process's threads and whether CUPTI's library is mapped (Linux's /proc; {} elsewhere)."""
    try:
        threads = len(os.listdir("/proc/self/task"))
        with open("/proc/self/maps") as fh:
            cupti = any("libcupti" in line for line in fh)
    except OSError:
        return {}
    return {"threads": threads, "cupti": cupti}


class GpuMarks:
    """CUDA events at the 1st, 2nd, 4th ... stamp: the device's clock for a script that ends before its bound."""

    def __init__(self, torch) -> None:  # type: ignore[no-untyped-def]
        self.torch = torch
        self.events: list[tuple[int, Any]] = []  # (stamps so far, the event recorded then)

    def mark(self, n: int) -> None:
        cuda = self.torch.cuda
        if n & (n - 1) or not cuda.is_initialized() or cuda.is_current_stream_capturing():
            return
        event = cuda.Event(enable_timing=True)
        event.record()
        self.events.append((n, event))

    def times(self, kinds: list[str], kind: str) -> list[list[float]]:
        """The events as [steps of KIND stamped by then, ms since the first event]."""
        if not self.events:
            return []
        try:
            self.events[-1][1].synchronize()
            first = self.events[0][1]
            return [[sum(1 for k in kinds[:n] if k == kind), first.elapsed_time(event)] for n, event in self.events]
        except Exception:  # noqa: BLE001 (a broken CUDA context at exit: the host stamps stand alone)
            return []


def main() -> None:
    out, script = sys.argv[1], sys.argv[2:]
    rank = os.environ.get("RANK")
    if rank is not None:
        out = f"{out}.rank{rank}"
    import torch
    from torch.nn.modules import module
    from torch.optim.optimizer import register_optimizer_step_post_hook

    stamps: list[tuple[float, bool, str]] = []
    enabled = torch.autograd._profiler_enabled
    began = time.perf_counter()

    max_steps = int(os.environ.get("STEPRATE_MAX_STEPS") or 0)
    max_s = float(os.environ.get("STEPRATE_MAX_S") or 0)
    sync_share = float(os.environ.get("STEPRATE_SYNC_SHARE") or 0)
    synced: list[tuple[int, float]] = []  # (stamps so far, when the GPU had finished them)
    marks = GpuMarks(torch)
    forks = Forks()
    forks.install()

    def sync() -> None:
        if not torch.cuda.is_initialized():
            return  # a CPU run: its host stamps are its steps' ends
        torch.cuda.synchronize()
        synced.append((len(stamps), time.perf_counter()))

    def stamp(kind: str) -> None:
        now = time.perf_counter()
        stamps.append((now, bool(enabled()), kind))
        marks.mark(len(stamps))
        if sync_share and not synced and ((max_steps and len(stamps) >= sync_share * max_steps)
                                         or (max_s and now - stamps[0][0] >= sync_share * max_s)):
            sync()
        if (max_steps and len(stamps) >= max_steps) or (max_s and now - stamps[0][0] >= max_s):
            if sync_share and synced:
                sync()
            write()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def after_step(optimizer, args, kwargs) -> None:  # type: ignore[no-untyped-def]
        stamp("optimizer")

    register_optimizer_step_post_hook(after_step)
    handles: list = []
    calls = [0, 0]  # module forwards begun and ended while learning the root; the root's calls after
    if os.environ.get("STEPRATE_FORWARD"):
        handles = forward_hooks(module, stamp, stamps, calls)

    def write() -> None:
        for handle in handles:
            handle.remove()
        ended = time.perf_counter()
        kind = "optimizer" if any(k == "optimizer" for _, _, k in stamps) else "forward"
        rows = [(t, on) for t, on, k in stamps if k == kind]
        # each wait as [steps of the counted kind stamped by then, time]
        waits = [[sum(1 for _, _, k in stamps[:n] if k == kind), t] for n, t in synced]
        with open(out, "w") as fh:
            json.dump({"began": began, "ended": ended, "source": kind, "t": [t for t, _ in rows],
                       "profiled": [on for _, on in rows], "synced": waits,
                       "events": marks.times([k for _, _, k in stamps], kind),
                       "forwards": {"begun": calls[0], "ended": calls[1]},
                       "forks": [[round(t - (stamps[0][0] if stamps else began), 4), round(ms, 3)]
                                 for t, ms in forks.spans], **held_at_end()}, fh)

    atexit.register(write)
    sys.argv = script
    sys.path[0] = os.path.dirname(os.path.abspath(script[0]))  # as `python SCRIPT` would have it: its siblings import
    runpy.run_path(script[0], run_name="__main__")


if __name__ == "__main__":
    main()
