"""Measure the rates the replay assumes where a trace cannot say (gpudoctor/replay/rates.py).

On a CUDA machine: fp32 vs TF32 vs bf16 GEMM time by size (the TF32 speed-up by the fp32
kernel's duration), host-to-device bandwidth from pageable and pinned memory, and the
GPU's gap between the nodes of a captured CUDA graph of tiny kernels against the same
kernels launched one by one, and what a `torch.compile`d function (default mode: Inductor's
generated kernels, no CUDA graphs) costs the host per kernel it launches, against the same
ops in eager mode (the host side of a compiled step, which the launch what-if of GD301 takes as
a captured graph's), and what a forward replayed as CUDA graphs by `torch.compile(mode=
"reduce-overhead")` costs per call and per kernel, host and GPU (the remedy GD301's launch what-if
predicts). On any machine: what a DataLoader batch costs the consuming loop when produced
in-process vs received from workers (the hand-off), and how fast one process computes while
k others compute beside it (`cpu_load`: a worker's batch time at k busy cores, what more workers
than a run had can expect of the host's clocks and shared caches), and two processes pinned to
two CPUs against one alone, for each pair with the first (`cpu_pairs`: which CPUs share a core).

    python benchmarks/rates.py [--json out.json]
        [--only handoff,gemm,copy,graph,compiled,compiled_train,cudagraph,cpu_load,cpu_pairs]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def cuda_time(fn, repeat: int = 10, warmup: int = 3) -> float:
    """Median milliseconds of fn() on the GPU, timed with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def gemm_rates() -> list[dict]:
    rows = []
    for n in (256, 512, 1024, 2048, 4096, 8192):
        a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        torch.backends.cuda.matmul.allow_tf32 = False
        fp32 = cuda_time(lambda a=a, b=b: a @ b)
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = cuda_time(lambda a=a, b=b: a @ b)
        torch.backends.cuda.matmul.allow_tf32 = False
        ab, bb = a.bfloat16(), b.bfloat16()
        bf16 = cuda_time(lambda ab=ab, bb=bb: ab @ bb)
        rows.append({"n": n, "fp32_us": round(fp32 * 1e3, 2), "tf32_us": round(tf32 * 1e3, 2),
                     "bf16_us": round(bf16 * 1e3, 2), "tf32_speedup": round(fp32 / tf32, 2),
                     "bf16_speedup": round(fp32 / bf16, 2)})
    return rows


def copy_rates(nbytes: int = 37 * 2**20) -> dict:
    pageable = torch.empty(nbytes, dtype=torch.uint8)
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    page_ms = cuda_time(lambda: device.copy_(pageable))
    pin_ms = cuda_time(lambda: device.copy_(pinned, non_blocking=True))
    return {"bytes": nbytes, "pageable_gb_s": round(nbytes / page_ms / 1e6, 2),
            "pinned_gb_s": round(nbytes / pin_ms / 1e6, 2), "ratio": round(page_ms / pin_ms, 2)}


def graph_gap(kernels: int = 1000) -> dict:
    x = torch.zeros(256, device="cuda")

    def chain():
        y = x
        for _ in range(kernels):
            y = y * 1.0001
        return y

    eager_ms = cuda_time(chain, repeat=5)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        chain()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    graph_ms = cuda_time(graph.replay, repeat=20)
    # what one replay call costs the host (Python + cudaGraphLaunch), for a small graph
    small = torch.cuda.CUDAGraph()
    with torch.cuda.graph(small):
        y = x
        for _ in range(10):
            y = y * 1.0001
    torch.cuda.synchronize()
    calls = []
    for _ in range(200):
        start = time.perf_counter()
        small.replay()
        calls.append((time.perf_counter() - start) * 1e6)
        torch.cuda.synchronize()
    return {"kernels": kernels, "eager_us_per_kernel": round(eager_ms * 1e3 / kernels, 3),
            "graph_us_per_kernel": round(graph_ms * 1e3 / kernels, 3),
            "replay_call_host_us_median": round(statistics.median(calls), 2)}


def _kernel_times(fn) -> list[float]:
    """Microseconds of each GPU kernel one call of fn() runs (copies and memsets left out), by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.time_range.elapsed_us() for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
            and not e.name.lower().startswith(("memcpy", "memset"))]


def _kernel_names(fn) -> list[str]:
    """Names of the GPU kernels one call of fn() runs (copies and memsets left out)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
            and not e.name.lower().startswith(("memcpy", "memset"))]


def _kernels(fn) -> int:
    """GPU kernels one call of fn() launches."""
    return len(_kernel_times(fn))


def _host_us(fn, calls: int) -> float:
    """Median microseconds the host spends in one call of fn() (the GPU runs it behind; synced between calls)."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def compiled_launch(counts: tuple[int, ...] = (4, 16, 64), calls: int = 300) -> dict:
    """The host's cost per kernel of a torch.compile'd function against eager: K softmaxes of tensors of K
    different shapes (one kernel each, nothing to fuse across them), for several K; the slope of host time
    over kernels launched is the cost per kernel, the intercept the cost per call (guards, the wrapper)."""
    def softmaxes(*xs):  # type: ignore[no-untyped-def]
        return [torch.softmax(x * 2.0, -1) for x in xs]

    rows = []
    for k in counts:
        xs = [torch.randn(32, 64 + i, device="cuda") for i in range(k)]
        row: dict = {"softmaxes": k}
        # a new compiled function for each K (its own graph), called as the eager one is
        for mode, fn in (("compiled", torch.compile(softmaxes, dynamic=False)), ("eager", softmaxes)):
            call = functools.partial(fn, *xs)
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            row[f"{mode}_kernels"] = _kernels(call)
            row[f"{mode}_host_us"] = round(_host_us(call, calls), 2)
        rows.append(row)
    out: dict = {"rows": rows}
    for mode in ("compiled", "eager"):
        kernels = [r[f"{mode}_kernels"] for r in rows]
        host = [r[f"{mode}_host_us"] for r in rows]
        if len(set(kernels)) > 1:
            slope, intercept = statistics.linear_regression(kernels, host)
            out[f"{mode}_host_us_per_kernel"] = round(slope, 3)
            out[f"{mode}_host_us_per_call"] = round(intercept, 2)
    return out


def _back_to_back_us(fn, calls: int) -> float:
    """Microseconds a call when fn() is called over and over without a sync, as a serving loop does:
    the slower of the host's calls and the GPU's work sets it."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def cudagraph_calls(layer_counts: tuple[int, ...] = (6, 24, 96), calls: int = 500) -> dict:
    """A forward replayed as CUDA graphs by torch.compile(mode="reduce-overhead") against eager: a
    batch-1 MLP of L Linear(256, 256)+ReLU layers in inference mode (the launch-bound serving loop GD301
    names), for several L. Per call: the host's time (synced between calls), the kernels' summed time,
    and the time a call takes back to back. The slope of the graph's back-to-back time over its kernels
    is what each kernel costs inside a replayed graph (its run and the gap to the next), the intercept
    what a compiled call costs beyond them (guards, the CUDA-graph tree, the replay's launch): the
    numbers the launch what-if (gpudoctor/replay/edits.py) takes from GRAPH_KERNEL_US and one launch."""
    rows = []
    for layers in layer_counts:
        blocks: list[torch.nn.Module] = []
        for _ in range(layers):
            blocks += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
        model = torch.nn.Sequential(*blocks).cuda().eval()
        x = torch.randn(1, 256, device="cuda")
        row: dict = {"layers": layers}
        with torch.inference_mode():
            compiled = torch.compile(model, mode="reduce-overhead")
            for mode, fn in (("eager", model), ("graph", compiled)):
                call = functools.partial(fn, x)
                for _ in range(5):  # compile, record, then replay
                    call()
                torch.cuda.synchronize()
                times = _kernel_times(call)
                row[f"{mode}_kernels"] = len(times)
                row[f"{mode}_kernel_us"] = round(sum(times), 2)
                row[f"{mode}_host_us"] = round(_host_us(call, calls), 2)
                row[f"{mode}_back_to_back_us"] = round(_back_to_back_us(call, calls), 2)
        rows.append(row)
        torch._dynamo.reset()
    out: dict = {"rows": rows}
    kernels = [r["eager_kernels"] for r in rows]
    if len(set(kernels)) > 1:
        for key in ("graph_back_to_back_us", "graph_host_us", "eager_back_to_back_us"):
            slope, intercept = statistics.linear_regression(kernels, [r[key] for r in rows])
            out[f"{key}_per_kernel"] = round(slope, 3)
            out[f"{key}_per_call"] = round(intercept, 2)
    return out


class _Block(torch.nn.Module):
    """A transformer-style MLP block: what a compiler fuses (GELU, the residual add, LayerNorm) between
    what it cannot (the two GEMMs)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


def _train_step_costs(model: torch.nn.Module, fn, x: torch.Tensor, calls: int) -> dict:  # type: ignore[no-untyped-def]
    """Kernels (all, and those of libraries: GEMMs, convolutions) and median host microseconds of
    fn(x).sum()'s forward and of its backward()."""
    from gpudoctor.collectors.kineto_names import library_kernel

    holder: dict = {}

    def forward() -> None:
        holder["loss"] = fn(x).sum()

    def backward() -> None:
        holder.pop("loss").backward()

    for _ in range(5):  # compile, warm the allocator
        forward()
        backward()
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    forward_names = _kernel_names(forward)
    backward_names = _kernel_names(backward)
    model.zero_grad(set_to_none=True)
    fwd, bwd = [], []
    for _ in range(calls):
        start = time.perf_counter()
        forward()
        middle = time.perf_counter()
        backward()
        end = time.perf_counter()
        torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        fwd.append((middle - start) * 1e6)
        bwd.append((end - middle) * 1e6)
    return {"forward_kernels": len(forward_names), "forward_library": sum(map(library_kernel, forward_names)),
            "backward_kernels": len(backward_names), "backward_library": sum(map(library_kernel, backward_names)),
            "forward_host_us": round(statistics.median(fwd), 2), "backward_host_us": round(statistics.median(bwd), 2)}


def _mlp(layers: int, width: int) -> torch.nn.Module:
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*blocks)


def _fit(rows: list[dict], key: str) -> dict:
    """host = per call + per kernel x kernels, the least-squares line over ROWS. (The kernels of libraries
    are counted too, but a fit telling them from generated ones needs mixes further apart than these
    models give: on an H100 it came out negative for one of the two.)"""
    total = [r[f"{key}_kernels"] for r in rows]
    if len(set(total)) < 2:
        return {}
    slope, intercept = statistics.linear_regression(total, [r[f"{key}_host_us"] for r in rows])
    return {"host_us_per_kernel": round(slope, 3), "host_us_per_call": round(intercept, 2)}


def compiled_train(counts: tuple[int, ...] = (3, 8, 24), calls: int = 200) -> dict:
    """A training step's forward and backward, torch.compile'd (default mode: Inductor's kernels, no CUDA
    graphs) against eager, for two models of several depths on a batch of 32 rows: N transformer-style MLP
    blocks of width 256 (two GEMMs and what Inductor fuses around them) and an MLP of 1.5 N Linear(256,
    256)+ReLU layers (mostly GEMMs). Per mode: the kernels forward and backward launch (all, and those of
    libraries), and the host's time in each (the forward call; backward(), whose caller waits while
    autograd's engine launches). Per mode and part, the line over the kernels (what a kernel costs the
    host, the intercept a call's own cost): what the plain-compile what-if (gpudoctor/replay/edits.py,
    rates.COMPILED_*) takes, the backward still being run by the engine."""
    rows = []
    for family in ("block", "mlp"):
        for count in counts:
            model = (torch.nn.Sequential(*[_Block(256) for _ in range(count)]) if family == "block"
                     else _mlp(count * 3 // 2, 256)).cuda()
            x = torch.randn(32, 256, device="cuda")
            row: dict = {"model": family, "depth": count}
            for mode, fn in (("eager", model), ("compiled", torch.compile(model))):
                costs = _train_step_costs(model, fn, x, calls)
                row.update({f"{mode}_{key}": value for key, value in costs.items()})
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)  # each row as it comes, should the run be cut
            torch._dynamo.reset()
    out: dict = {"rows": rows}
    for mode in ("eager", "compiled"):
        for part in ("forward", "backward"):
            out.update({f"{mode}_{part}_{k}": v for k, v in _fit(rows, f"{mode}_{part}").items()})
    return out


def loop_work(ms: float, x: torch.Tensor) -> None:
    """`ms` of small torch ops, as a training loop's launches (each releases the GIL while it runs)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        torch.mm(x, x)


def handoff(batches: int = 300) -> list[dict]:
    """What the consuming loop pays per batch: in-process vs from workers, with nothing else in the loop
    and with 3 ms of torch ops a batch (then the batches wait in the queue, and the time in __next__ is
    the hand-off alone). With pin_memory on a CUDA machine a thread of the loop's process receives and
    pins the batches beside the loop (input_pipeline.HANDOFF_PINNED_S)."""
    data = TensorDataset(torch.randn(200_000, 32), torch.randint(0, 10, (200_000,)))
    x = torch.randn(64, 64)
    rows = []
    for pin in (False, True) if torch.cuda.is_available() else (False,):
        for work_ms in (0.0, 3.0):
            for workers in (0, 1, 2, 4, 8):
                loader = DataLoader(data, batch_size=64, num_workers=workers, persistent_workers=workers > 0,
                                    pin_memory=pin)
                it = iter(loader)
                for _ in range(20):
                    next(it)
                    loop_work(work_ms, x)
                waited = 0.0
                start = time.perf_counter()
                for _ in range(batches):
                    asked = time.perf_counter()
                    next(it)
                    waited += time.perf_counter() - asked
                    loop_work(work_ms, x)
                rows.append({"num_workers": workers, "pin_memory": pin, "loop_work_ms": work_ms,
                             "ms_per_batch": round((time.perf_counter() - start) / batches * 1e3, 3),
                             "ms_in_next": round(waited / batches * 1e3, 3)})
                del it
    return rows


def _busy_work(seconds: float, start: float, out) -> None:  # type: ignore[no-untyped-def]
    """A DataLoader worker's kind of work, single-threaded: Python per sample and small tensor ops,
    from `start` (a shared instant, so that all run together) for `seconds`; puts rounds per second."""
    torch.set_num_threads(1)
    x = torch.randn(32, 32)
    while time.time() < start:
        time.sleep(0.001)
    rounds, end = 0, start + seconds
    while time.time() < end:
        total = 0
        for i in range(2000):  # Python, as a __getitem__ is
            total += i * i % 7
        for _ in range(20):  # small tensor ops, as a transform and the collate are
            x = torch.tanh(x @ x) * 0.5
        rounds += 1
    out.put(rounds / seconds)


def cpu_load(seconds: float = 1.5) -> dict:
    """Each process's speed with k processes computing at once, against one alone: the median rate over
    the k processes, for k from 1 to the usable cores (a worker's batch time grows as 1 / that speed)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    counts = sorted({k for k in (1, 2, 4, 6, 8, 10, 12, 14, 15, 16, cores) if k <= cores})
    rows = []
    for k in counts:
        rates = _together([None] * k, seconds)
        rows.append({"busy": k, "rate": round(statistics.median(rates), 2), "slowest": round(min(rates), 2)})
    alone = rows[0]["rate"]
    for row in rows:
        row["speed"] = round(row["rate"] / alone, 3)
    return {"cores": cores, "seconds": seconds, "rows": rows}


def _pinned_work(cpu: int | None, seconds: float, start: float, out) -> None:  # type: ignore[no-untyped-def]
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    _busy_work(seconds, start, out)


def _together(cpus: list[int | None], seconds: float) -> list[float]:
    """Rounds per second of one process per entry of `cpus` (pinned to it; None: where the scheduler
    puts it), all computing at once."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    start = time.time() + 0.3
    procs = [context.Process(target=_pinned_work, args=(cpu, seconds, start, queue)) for cpu in cpus]
    for proc in procs:
        proc.start()
    rates = [queue.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join()
    return rates


def cpu_pairs(seconds: float = 1.0) -> dict:
    """Two processes pinned to the first usable CPU and to each other one in turn, against one alone: a
    pair far below 1 shares a physical core (SMT siblings a virtual machine may not show) or its
    caches. What a run's few workers get depends on where the scheduler puts them."""
    cpus = sorted(os.sched_getaffinity(0))
    alone = _together([cpus[0]], seconds)[0]
    rows = [{"cpus": [cpus[0], other], "speed": round(min(_together([cpus[0], other], seconds)) / alone, 3)}
            for other in cpus[1:]]
    return {"first": cpus[0], "alone": round(alone, 2), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json")
    parser.add_argument("--only", help="comma-separated sections: handoff, gemm, copy, graph, compiled, "
                        "compiled_train, cudagraph, cpu_load, cpu_pairs (default: all)")
    args = parser.parse_args()
    sections = {"handoff": ("handoff_tensordataset_batch64", handoff, False), "gemm": ("gemm", gemm_rates, True),
                "copy": ("copy", copy_rates, True), "graph": ("graph", graph_gap, True),
                "compiled": ("compiled_launch", compiled_launch, True),
                "compiled_train": ("compiled_train", compiled_train, True),
                "cudagraph": ("cudagraph_calls", cudagraph_calls, True), "cpu_load": ("cpu_load", cpu_load, False),
                "cpu_pairs": ("cpu_pairs", cpu_pairs, False)}
    wanted = args.only.split(",") if args.only else list(sections)
    unknown = [name for name in wanted if name not in sections]
    if unknown:
        parser.error(f"unknown section(s): {', '.join(unknown)} (choose from {', '.join(sections)})")
    out: dict = {"torch": torch.__version__}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
    for name in wanted:
        key, measure, needs_cuda = sections[name]
        if needs_cuda and not torch.cuda.is_available():
            continue
        try:
            out[key] = measure()
        except Exception as exc:  # noqa: BLE001 (one section's failure leaves the others' numbers)
            out[key] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
