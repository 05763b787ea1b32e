"""What the agent costs a loop outside its windows, on the CPU: plain against diagnose.

Two loops, one CPU thread each, where a per-call cost of the agent shows most:

- `forward`: a batch-1 forward of 37 small modules (12 x Linear(64, 64) + LayerNorm + GELU,
  then a Linear), 4,000 forwards: what the step sources cost each module call of a stepless
  inference loop;
- `train`: a training loop fed by a `num_workers=0` DataLoader (TensorDataset, batch 32,
  Linear(16, 1), SGD), 4,000 steps: what the loader's, the fetchers' and the step sources'
  wrappers cost each batch and step (in the loop's own thread, in series with the step).

Each run prints its median microseconds per iteration over chunks of 100 (the first quarter of the
chunks left out); plain runs and `gpudoctor diagnose --no-profile --no-loader-profile` runs
(no window) alternate in pairs (plain first in even pairs, last in odd ones). Without the
windows the difference is what the agent's hooks cost; the step harness of
benchmarks/overhead.py cannot show it, since its own hooks are in both sides of its
comparison.

    python benchmarks/agent_cost.py [--workload forward|train] [--pairs 3]
    python benchmarks/agent_cost.py --in-process [--pairs 3]
    python benchmarks/agent_cost.py --workers [--pairs 3]

`--in-process` puts the train loop's hooks (the DataLoader's, its fetchers', backward()'s and
the optimizer's) in and out on alternate epochs of one process, without the agent's thread,
the supervisor or windows: the cost the loop's own thread pays each step, with the drift of
the machine between processes cancelled (the whole-process pairs spread 15-20% on a VM).

`--workers` compares, in one process under `gpudoctor.watch()`, a loader whose 2 persistent
workers were forked before the watch with one whose workers were forked inside it (the agent's
hooks in them), batches of 1,024 0-d tensors: what the agent costs the workers themselves.

Run on a quiet machine; `--loop` runs the workload itself.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def forward_loop() -> list[float]:
    import torch

    torch.set_num_threads(1)
    layers: list[torch.nn.Module] = []
    for _ in range(12):
        layers += [torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 10)).eval()
    x = torch.randn(1, 64)
    chunks = []
    with torch.inference_mode():
        for _ in range(40):
            began = time.perf_counter()
            for _ in range(100):
                model(x)
            chunks.append((time.perf_counter() - began) / 100 * 1e6)
    return chunks


def train_loop(epochs: int = 40, before_epoch: Callable[[int], None] | None = None) -> list[float]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(3200, 16), torch.randn(3200, 1))
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    chunks = []
    for epoch in range(epochs):  # an epoch of 100 batches each: a new iterator every 100 steps, as in training
        if before_epoch is not None:
            before_epoch(epoch)
        began = time.perf_counter()
        for x, y in DataLoader(data, batch_size=32, shuffle=True):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        chunks.append((time.perf_counter() - began) / 100 * 1e6)
    return chunks


def in_process(epochs: int) -> tuple[float, float]:
    """The train loop's hooks alone (the DataLoader's and its fetchers' wrappers, backward(), the
    optimizer's post-step hook: what the agent installs for it), in and out on alternate epochs of
    one process, so the machine's drift between processes cancels. The agent's thread, supervisor
    and windows are left out: this is what the loop's own thread pays each step. Returns the median
    microseconds a step without and with them (the first quarter of each left out)."""
    from types import SimpleNamespace

    import torch
    from torch.optim import optimizer as optim_mod
    from torch.utils.data import dataloader as dl
    from torch.utils.data._utils import fetch as fetch_mod

    from gpudoctor.agent.step_sources import BackwardSteps
    from gpudoctor.agent.torch_hooks import TorchHooks

    slots = [(dl._BaseDataLoaderIter, "__init__"), (dl._BaseDataLoaderIter, "__next__"),
             (dl.DataLoader, "_get_iterator"), (fetch_mod._MapDatasetFetcher, "fetch"),
             (fetch_mod._IterableDatasetFetcher, "fetch"), (torch.autograd, "backward")]
    # the post-step hooks have no public way out: their registry is swapped as a whole
    registry = optim_mod._global_optimizer_post_hooks

    def installed() -> tuple[list[Any], dict[Any, Any]]:
        return [getattr(owner, name) for owner, name in slots], dict(registry)

    plain = installed()
    agent = SimpleNamespace(config={"fetch_profile": False}, emit=lambda kind, **fields: None,
                            emit_steps=lambda steps: None, error=lambda where, exc: print(where, exc))
    hooks = TorchHooks(agent, torch)  # type: ignore[arg-type]  # the agent's parts a loop's thread touches
    hooks._patch_dataloader()
    hooks._patch_fetchers()
    hooks._patch_optimizer()
    BackwardSteps(hooks).install()
    hooked = installed()

    def before_epoch(epoch: int) -> None:
        functions, post_hooks = hooked if epoch % 2 else plain
        for (owner, name), fn in zip(slots, functions):
            setattr(owner, name, fn)
        registry.clear()
        registry.update(post_hooks)
        hooks.steps.flush()  # the agent's thread does this each second

    chunks = train_loop(epochs, before_epoch)
    before_epoch(0)  # torch as it was
    off, on = chunks[0::2], chunks[1::2]
    return statistics.median(off[len(off) // 4:]), statistics.median(on[len(on) // 4:])


class _TensorItems:
    """Item i is a 0-d tensor (issue 24's loader: the workers' CPU is in the items and their collate)."""

    def __len__(self) -> int:
        return 65536

    def __getitem__(self, i: int) -> Any:
        import torch

        return torch.tensor(i)


def worker_side(rounds: int, batch: int = 1024, batches: int = 40) -> tuple[float, float]:
    """What the agent costs a DataLoader's workers: two loaders of 2 persistent workers each, one
    forked before a `gpudoctor.watch()` (plain workers), one inside it (the agent's hooks in its
    workers), iterated in alternate order each round inside the watch, so the main process's hooks
    are the same for both and the machine's drift cancels. Returns the median milliseconds a batch
    reaches the loop from plain and from hooked workers (the first two rounds left out)."""
    from torch.utils.data import DataLoader

    import gpudoctor

    def started() -> Any:
        loader = DataLoader(_TensorItems(), batch_size=batch, shuffle=True, num_workers=2, persistent_workers=True)
        next(iter(loader))  # forks its workers now
        return loader

    plain_loader = started()
    times: dict[str, list[float]] = {"plain": [], "hooked": []}
    with gpudoctor.watch("agent_cost", progress=False, profile=False):
        loaders = {"plain": plain_loader, "hooked": started()}
        for round_no in range(rounds):
            for name in ("plain", "hooked") if round_no % 2 == 0 else ("hooked", "plain"):
                it = iter(loaders[name])
                began = time.perf_counter()
                for _ in range(batches):
                    next(it)
                times[name].append((time.perf_counter() - began) / batches * 1e3)
    return statistics.median(times["plain"][2:]), statistics.median(times["hooked"][2:])


LOOPS = {"forward": forward_loop, "train": train_loop}


def loop(workload: str) -> None:
    chunks = LOOPS[workload]()
    print(f"us_per_iteration {statistics.median(chunks[len(chunks) // 4:]):.2f}")


def run(workload: str, diagnose: bool) -> float:
    command = [sys.executable, __file__, "--loop", "--workload", workload]
    with tempfile.TemporaryDirectory() as out:
        if diagnose:
            command = [sys.executable, "-m", "gpudoctor", "diagnose", "--no-profile", "--no-loader-profile",
                       "--quiet", "--out", f"{out}/r/", "--", *command]
        text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    found = re.search(r"us_per_iteration ([0-9.]+)", text)
    if found is None:
        raise SystemExit(f"no result in the output of {' '.join(command)}:\n{text}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(LOOPS), default="train")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--in-process", action="store_true",
                        help="the train loop's hooks alone, in and out on alternate epochs of one process")
    parser.add_argument("--workers", action="store_true",
                        help="the agent's cost in a DataLoader's workers: plain and hooked workers in one process")
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        loop(args.workload)
        return
    if args.workers:
        ratios = []
        for run_no in range(args.pairs):
            plain, hooked = worker_side(20)
            ratios.append(hooked / plain)
            print(f"run {run_no + 1}: plain workers {plain:.3f} ms a batch, hooked workers {hooked:.3f} ms: "
                  f"{ratios[-1]:.3f}", flush=True)
        print(f"median time ratio hooked / plain over {len(ratios)} runs: {statistics.median(ratios):.3f}")
        return
    if args.in_process:
        for run_no in range(args.pairs):
            off, on = in_process(80)
            print(f"run {run_no + 1}: without the hooks {off:.1f} us, with them {on:.1f} us a step: "
                  f"+{on - off:.1f} us", flush=True)
        return
    ratios = []
    for pair in range(args.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)  # alternated within pairs
        result = {kind: run(args.workload, kind) for kind in order}
        ratios.append(result[True] / result[False])
        print(f"pair {pair + 1}: plain {result[False]:.1f} us, diagnose {result[True]:.1f} us per iteration, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"median time ratio diagnose / plain over {len(ratios)} pairs: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
