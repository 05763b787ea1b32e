"""What torch.compile (default mode: Inductor, no CUDA graphs) could buy beyond launch overhead,
tried on kept H200 windows (issue 25). An experiment, not a shipped what-if: it prints, per
window, the gain of the replay's own ``launch`` scenario (GD301: every launch chain outside
``optimizer.step()`` as one captured graph) beside three variants that add fusion:

- ``fusion``: the GPU side alone, the host as measured. Per stream, each run of two or more
  memory-bound kernels (elementwise, norms, softmax, casts, copies: any kernel that is not a
  GEMM, convolution or attention kernel) launched outside ``optimizer.step()`` between two
  compute kernels becomes one kernel as long as the run's longest kernel (a fused kernel still
  streams at least the largest member's tensors; the trace records no shapes, so no bytes);
  the launch calls of the kernels fused away cost nothing.
- ``launch+fusion``: the shipped ``launch`` edit, then the GPU side of ``fusion``.
- ``compiled@C``: a host model of default-mode compile: in each launch chain the framework's
  Python and the dispatch of generated (memory-bound) kernels go, each generated kernel left
  after fusion costs the host C us to launch, and the extern calls Inductor keeps (matmuls,
  attention) keep their measured dispatch and launch; GPU side as ``fusion``. C is not
  measured: no kept trace holds a compiled run.

    python3 benchmarks/compile_whatif.py benchmarks/corpus/results/h200 \\
        --only nanogpt_bench_gpt2,timm_benchmark_infer_vit,nanogpt_train_char
    python3 benchmarks/compile_whatif.py --session S.session.json --trace W.trace.json.gz
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.collectors.trace_decode import read_trace
from gpudoctor.collectors.windows import primary_calibration_steps
from gpudoctor.replay import edits, scenarios
from gpudoctor.replay.items import DISPATCH, LAUNCH
from gpudoctor.replay.simulate import Plan
from gpudoctor.replay.timeline import Timeline
from gpudoctor.session import Session

# kernels Inductor leaves to a library (cuBLAS/cuDNN/CUTLASS GEMMs and convolutions, SDPA's
# attention kernels and cuDNN attention's helpers) or that compiling the model does not touch
# (the optimizer's multi-tensor kernels); every other kernel is memory-bound work Inductor
# generates, and may fuse: cuDNN's batch-norm kernels (``cudnn::bn_fw_tr_...``) among them,
# since Inductor decomposes batch norm in training into reductions and pointwise ops
COMPUTE = re.compile(r"gemm|nvjet|cutlass|cublas|xmma|wgmma|sdpa|fmha|flash|attention|conv|dgrad|wgrad|winograd"
                     r"|splitkreduce|dot_do_o|dq_to_16bits|multi_tensor_apply", re.IGNORECASE)
LAUNCH_COSTS_US = (0.0, 5.0, 10.0, 20.0)


def _compute(timeline: Timeline, op: int) -> bool:
    return bool(COMPUTE.search(timeline.ops[op].name))


def fusible_runs(timeline: Timeline) -> list[list[int]]:
    """Per stream, the runs of two or more memory-bound kernels launched in the window outside
    optimizer.step() with no compute kernel between them (copies and memsets neither join nor end one)."""
    runs: list[list[int]] = []
    current: dict[Any, list[int]] = {}
    for j, op in enumerate(timeline.ops):
        if op.kind != "k":
            continue
        if op.launch >= 0 and not timeline.host.optimizer[op.launch] and not _compute(timeline, j):
            current.setdefault(op.stream, []).append(j)
            continue
        run = current.pop(op.stream, [])
        if len(run) > 1:
            runs.append(run)
    runs.extend(run for run in current.values() if len(run) > 1)
    return runs


def fuse(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """Each fusible run as one kernel of its longest member's duration; the others' launch calls go."""
    runs = fusible_runs(timeline)
    gone = 0
    for run in runs:
        kept = max(run, key=plan.dur.__getitem__)
        for j in run:
            if j == kept:
                continue
            plan.dur[j] = plan.gap[j] = 0.0
            call = timeline.ops[j].launch
            if len(timeline.host.ops[call]) == 1:
                plan.cost[call] = 0.0
            gone += 1
    return gone, f"{len(runs)} runs of memory-bound kernels fused, {gone} kernels gone"


def launch_and_fuse(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    changed, _ = edits.launch(timeline, plan)
    gone, detail = fuse(timeline, plan)
    return changed + gone, detail


def compiled(launch_us: float) -> Callable[[Timeline, Plan], tuple[int, str]]:
    def edit(timeline: Timeline, plan: Plan) -> tuple[int, str]:
        gone, detail = fuse(timeline, plan)
        members, _ = edits._chains(timeline, plan, False)
        host = timeline.host
        dispatch: list[int] = []  # the dispatch items since the chain's last launch call
        for i in members.tolist():
            if host.kind[i] == LAUNCH:
                if not any(_compute(timeline, j) for j in host.ops[i]):  # a generated kernel
                    for k in dispatch:
                        plan.cost[k] = 0.0
                    if plan.cost[i] > 0:  # not fused away
                        plan.cost[i] = launch_us
                dispatch = []
            elif host.tag[i] == DISPATCH:
                dispatch.append(i)
            else:
                plan.cost[i] = 0.0
        for k in dispatch:
            plan.cost[k] = 0.0
        return gone, detail
    return edit


VARIANTS = [scenarios.Scenario("launch", "", edits.launch), scenarios.Scenario("fusion", "", fuse),
            scenarios.Scenario("launch+fusion", "", launch_and_fuse)] + [
    scenarios.Scenario(f"compiled@{cost:g}", "", compiled(cost)) for cost in LAUNCH_COSTS_US]


def gains(session: Session, trace: Path) -> dict[str, Any]:
    profile = session.profile
    if profile is None:
        return {"why": "no profiler window"}
    summary = scenarios.replay_trace(read_trace(trace, own_window=True), profile.steps,
                                     primary_calibration_steps(session), source=profile.step_source,
                                     scenarios=VARIANTS)
    if summary is None or summary.error:
        return {"why": summary.error if summary else "nothing to replay"}
    steps = max(summary.steps, 1)
    row: dict[str, Any] = {"window": profile.phase, "calibration": summary.calibration,
                           "step_ms": round(summary.baseline_span_us / steps / 1e3, 2),
                           "gpu_ms": round(summary.baseline_gpu_busy_us / steps / 1e3, 2)}
    for scenario in summary.scenarios:
        row[scenario.name] = round(scenarios.gain(summary, scenario.name) or 0.0, 2)
        row[f"{scenario.name} gpu_ms"] = round(scenario.gpu_busy_us / steps / 1e3, 2)
    return row


def corpus_rows(directory: Path, only: set[str]) -> list[dict[str, Any]]:
    sys.path.insert(0, str(Path(__file__).resolve().parent / "corpus"))
    from keep import read_member

    rows = []
    for entry in json.loads((directory / "corpus.json").read_text())["workloads"]:
        kept = entry.get("kept") or {}
        if entry["workload"] not in only or not kept.get("trace"):
            continue
        session = Session.from_dict(json.loads(read_member(directory, kept["sessions"], kept["session"])))
        with tempfile.TemporaryDirectory(prefix="gd-compile-") as scratch:
            trace = Path(scratch) / "window.trace.json"
            trace.write_bytes(read_member(directory, kept["traces"], kept["trace"]))
            row = {"workload": entry["workload"], **gains(session, trace)}
        row["realized"] = {r["remedy"]: r.get("realized") for r in entry.get("remedies") or []
                           if "compile" in r["remedy"]}
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, nargs="?", help="a corpus results directory (corpus.json, bundles)")
    parser.add_argument("--only", default="", help="workloads, comma-separated")
    parser.add_argument("--session", type=Path)
    parser.add_argument("--trace", type=Path)
    args = parser.parse_args()
    if args.session and args.trace:
        rows = [{"session": args.session.name,
                 **gains(Session.from_dict(json.loads(args.session.read_text())), args.trace)}]
    elif args.results:
        rows = corpus_rows(args.results, {name for name in args.only.split(",") if name})
    else:
        parser.error("a results directory, or --session with --trace")
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
