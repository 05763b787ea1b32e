"""What `gpudoctor diagnose` costs the workload it watches: plain against diagnose, paired.

For each workload of the overhead corpus (below: loaders whose waits overlap queued GPU
work with 2, 4 and 8 workers, a loader that starts new workers for every iterator, a
`num_workers=0` loader, torch.compile, DDP with 2 ranks on one GPU, a stepless inference
loop, pageable copies, a launch-bound loop, a `num_workers=0` loop of Python-heavy items), it
runs the workload plain and under `gpudoctor diagnose` with default options, alternated in
pairs, each under benchmarks/corpus/steprate.py (which stamps each step, and whether
torch.profiler was on when it ended). Per run:

- throughput outside the profiler windows: steady steps (the first 20% left out) that no
  window overlapped, over their time (a plain run has no window: all its steady steps);
- whole-run throughput: every steady step, windows included.

The ratio diagnose / plain is taken per pair; the table gives the median of pairs. Where the
workload reports its workers' CPU per batch (`loader_reiter`'s `workers_cpu_ms_per_batch`), the
table also gives the ratio of throughput x that CPU: a loop whose workers set its pace runs at
about workers / CPU per batch, and a host whose cores compute faster or slower from run to run
(the clock it gives falls as more of its cores compute: `rates.py --only cpu_load`) moves both
alike, so the product keeps what the workers' speed does not explain.
Goal (issue 24): outside the windows every workload within 3% of plain, the median within
1%. `--configs` adds the issue's other rows (`no-loader-profile`, `no-profile`), and the
agent's start-up cost is measured too (a few milliseconds at most).

    python3 benchmarks/overhead.py --out DIR [--pairs 2] [--workloads a,b] [--configs plain,diagnose]
                                   [--diagnose-env KEY=VALUE ...] [--keep-runs]

`--keep-runs` keeps each run's step stamps, its output, and diagnose's JSON report and Session, as
OUT/run-WORKLOAD-CONFIG-PAIR.NAME (to read where a slow run lost its time; one folder, no nesting). `--diagnose-env`
sets variables for the runs under gpudoctor only (to try a remedy for an overhead, e.g.
TEARDOWN_CUPTI=1, before building it in). The config `keep-cupti` is `diagnose` with TEARDOWN_CUPTI=0,
as a user may set it (Kineto then leaves CUPTI attached after each window): a slow-down that it
does not show comes from Kineto's CUPTI teardown. Each run also records, from the stamping
harness, its forks after the first (median and slowest, in ms), its thread count at the end
and whether CUPTI's library was loaded: the evidence that tells a slow diagnosed run's cause; and where
its time went outside the steady steps (to its first step, in the windows' steps, its slowest step),
and under diagnose what its own report said the windows cost (`reported`: their start and stop pauses)
and each window as its Session holds it (`windows`: steps, Python stacks or not, its stop, the stop
its counted step predicted).

Writes DIR/overhead.json and DIR/overhead.md as each workload finishes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "tests" / "workloads" / "gpu"
STEPRATE = ROOT / "benchmarks" / "corpus" / "steprate.py"
sys.path.insert(0, str(STEPRATE.parent))
import run as corpus_run  # noqa: E402 (the corpus runner's way of running and stopping a child)

SITE = ROOT / "gpudoctor" / "agent" / "_site"
WARMUP_SHARE = 0.2

# name -> (the command after the interpreter: a script and its arguments, or "torchrun ..." for DDP; extra env)
WORKLOADS: dict[str, tuple[list[str], dict[str, str]]] = {
    "loader_reiter_w2": ([str(GPU / "loader_reiter.py"), "--workers", "2", "--steps", "400"], {}),
    # the same on fixed cores (the loop's thread on CPU 1, its workers on 2 and 3): the host's
    # scheduler no longer picks, from run to run, which cores (and so which speeds) the workers get
    "loader_reiter_w2_pinned": ([str(GPU / "loader_reiter.py"), "--workers", "2", "--steps", "400",
                                 "--pin-cpus", "1,2,3"], {}),
    "loader_reiter_w2_workers_pinned": ([str(GPU / "loader_reiter.py"), "--workers", "2", "--steps", "400",
                                         "--pin-cpus", ",2,3"], {}),
    "loader_reiter_w4": ([str(GPU / "loader_reiter.py"), "--workers", "4", "--steps", "400"], {}),
    "loader_reiter_w8": ([str(GPU / "loader_reiter.py"), "--workers", "8", "--steps", "400"], {}),
    "loader_new_workers": ([str(GPU / "loader_reiter.py"), "--workers", "2", "--steps", "200", "--no-persistent",
                            "--item", "int"], {}),
    "loader_overlap_w0": ([str(GPU / "loader_overlap.py"), "--workers", "0", "--steps", "150"], {}),
    # about 3 s of steps: 300 (0.6 s) spread 473-585 steps/s between two plain runs
    "compiled_mlp": ([str(GPU / "compiled_mlp.py"), "--steps", "1500"], {}),
    "ddp_2ranks": (["torchrun", "--standalone", "--nproc-per-node", "2", str(GPU / "ddp_ranks.py")],
                   {"DDP_BACKEND": "gloo", "DDP_SHARE_GPU": "1", "DDP_STEPS": "150"}),
    "infer_stepless": ([str(GPU / "infer_10s.py"), "--seconds", "6"], {"STEPRATE_FORWARD": "1"}),
    "pageable_copies": ([str(GPU / "pageable_copies.py")], {}),
    "tiny_kernels": ([str(GPU / "tiny_kernels.py")], {}),
    # batches made in the loop's process by Python-heavy items, two loaders: what the windows' stops
    # cost shows in the whole-run rate and the wall time (the steady rate leaves the windows out)
    "python_loader_phases": ([str(ROOT / "tests" / "workloads" / "python_loader_phases.py")], {}),
}
CONFIGS = {
    "plain": None,
    "diagnose": [],
    "no-loader-profile": ["--no-loader-profile"],
    "no-profile": ["--no-profile", "--no-loader-profile"],
    "slow-sampling": ["--interval", "60"],  # the supervisor's CPU and NVML sampling almost off
    "bare": ["--no-profile", "--no-loader-profile", "--interval", "60"],  # in-process hooks alone
    "keep-cupti": [],  # defaults, with TEARDOWN_CUPTI=0 as a user may set it: Kineto leaves CUPTI attached
}
# variables a config sets for its own runs (gpudoctor leaves a user's TEARDOWN_CUPTI as it is)
CONFIG_ENV = {"keep-cupti": {"TEARDOWN_CUPTI": "0"}}


def command_for(workload: list[str], stamps: Path) -> list[str]:
    if workload[0] == "torchrun":  # each rank runs under the stamping harness
        return [sys.executable, "-m", "torch.distributed.run", *workload[1:-1], str(STEPRATE), str(stamps),
                workload[-1]]
    return [sys.executable, str(STEPRATE), str(stamps), *workload]


def run_once(name: str, config: str, out: Path, diagnose_env: dict[str, str] | None = None,
             keep: Path | None = None) -> dict[str, Any]:
    workload, extra_env = WORKLOADS[name]
    env = {**os.environ, **extra_env, **(diagnose_env if CONFIGS[config] is not None and diagnose_env else {}),
           **CONFIG_ENV.get(config, {})}
    with tempfile.TemporaryDirectory() as tmp:
        stamps = Path(tmp) / "steps.json"
        command = command_for(workload, stamps)
        flags = CONFIGS[config]
        if flags is not None:
            command = [sys.executable, "-m", "gpudoctor", "diagnose", "--quiet", *flags, "--out", f"{tmp}/r/",
                       "--", *command]
        start, host_before, children_before = time.perf_counter(), psutil.cpu_times(), os.times()
        with open(Path(tmp) / "stdout.txt", "w") as stdout:
            proc = corpus_run.launch(command, env=env, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE)
            stderr, stopped = corpus_run.communicate(proc, 600)
        wall = time.perf_counter() - start
        host = _host_use(host_before, psutil.cpu_times(), children_before, os.times(), wall)
        files = sorted(Path(tmp).glob("steps.json*"))
        if keep is not None:
            (Path(tmp) / "stderr.txt").write_text(stderr)  # Kineto's own log, when KINETO_LOG_LEVEL asks for it
            _keep(Path(tmp), keep)
        if stopped or proc.returncode != 0 or not files:
            why = "stopped after 600 s" if stopped else f"exit {proc.returncode}"
            return {"error": f"{why}: {stderr.strip()[-300:]}", "wall_s": wall}
        result = rates(json.loads(files[0].read_text()))
        result["wall_s"] = round(wall, 2)
        result["host"] = host
        said = _last_json_line(Path(tmp) / "stdout.txt")
        if said is not None:
            result["workload"] = said  # the workload's own summary (loader_reiter: its data wait per step)
        cost = _reported_overhead(Path(tmp) / "r")
        if cost is not None:
            result["reported"] = cost  # what diagnose's own report said its windows cost
        windows = _windows(Path(tmp) / "r")
        if windows:
            result["windows"] = windows  # each window's steps, stacks, stop, and the stop its counted step predicted
        return result


def _reported_overhead(reports: Path) -> dict[str, Any] | None:
    """`summary.profiler_overhead` of the JSON report a diagnosed run wrote (its windows' start and stop
    pauses, its rates inside and outside them, whether it slowed); None for a plain run."""
    for path in sorted(reports.glob("*.json")):
        if path.name.endswith(".session.json"):
            continue
        try:
            return json.loads(path.read_text()).get("summary", {}).get("profiler_overhead")
        except (OSError, ValueError, AttributeError):
            return None
    return None


WINDOW_FIELDS = ("label", "steps", "window_start_s", "window_end_s", "stacks", "stop_s", "counted_calls",
                 "stop_predicted_s", "cupti_detach")


def _windows(reports: Path) -> list[dict[str, Any]]:
    """The windows of a diagnosed run's Session, a few fields each (whether they recorded Python stacks,
    how long their stop held the loop, what the step counted before them predicted); [] for a plain run."""
    for path in sorted(reports.glob("*.session.json")):
        try:
            profiles = json.loads(path.read_text()).get("profiles") or []
            return [{k: w.get(k) for k in WINDOW_FIELDS} for w in profiles if isinstance(w, dict)]
        except (OSError, ValueError, AttributeError):
            return []
    return []


def _host_use(before: Any, after: Any, children_before: os.times_result, children_after: os.times_result,
              wall: float) -> dict[str, float]:
    """What the run's process tree used of the CPU (user and system seconds of the workload, its
    workers and, under diagnose, gpudoctor's supervisor and agent), how many of the machine's cores
    were busy on average (everyone's work), and how many it lost to its hypervisor (steal): whether
    a slow run did more work, or got less of the CPU."""
    used = ((children_after.children_user - children_before.children_user)
            + (children_after.children_system - children_before.children_system))
    # (guest time is counted in user and nice already: psutil's own cpu_percent leaves it out too)
    spent = {field: getattr(after, field, 0.0) - getattr(before, field, 0.0) for field in after._fields
             if field not in ("guest", "guest_nice")}
    idle = spent.get("idle", 0.0) + spent.get("iowait", 0.0)
    steal = spent.get("steal", 0.0)
    busy = sum(spent.values()) - idle - steal
    per_s = 1 / wall if wall > 0 else 0.0
    return {"tree_cpu_s": round(used, 2), "busy_cores": round(busy * per_s, 2), "steal_cores": round(steal * per_s, 3)}


def _last_json_line(path: Path) -> dict[str, Any] | None:
    """The last line of a workload's output, where it is a JSON object (the test workloads end so)."""
    lines = path.read_text(errors="replace").strip().splitlines()
    try:
        said = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return said if isinstance(said, dict) else None


def _keep(tmp: Path, keep: Path) -> None:
    """A run's step stamps, and under diagnose its JSON report and Session (not the trace): where a
    slow run lost its time can be read afterwards. `keep` is a prefix: KEEP.steps.json, ..."""
    keep.parent.mkdir(parents=True, exist_ok=True)
    for path in [*tmp.glob("steps.json*"), tmp / "stdout.txt", tmp / "stderr.txt", *(tmp / "r").glob("*.json")]:
        shutil.copy2(path, keep.parent / f"{keep.name}.{path.name}")


def rates(data: dict[str, Any]) -> dict[str, Any]:
    """Steady throughput outside the profiler windows, and over every steady step."""
    t, profiled = data["t"], data["profiled"]
    if len(t) < 10:  # a run with too few steps: its body time is all there is
        body = data["ended"] - data["began"]
        return {"steps": len(t), "outside": 1 / body, "whole": 1 / body, "profiled_steps": 0, "unit": "runs/s"}
    first = max(1, int(len(t) * WARMUP_SHARE))
    outside_n, outside_s, inside = 0, 0.0, 0
    for i in range(first, len(t)):
        if profiled[i] or profiled[i - 1]:  # the window was on when the step began or ended
            inside += 1
            continue
        outside_n += 1
        outside_s += t[i] - t[i - 1]
    whole = (len(t) - first) / (t[-1] - t[first - 1])
    evidence = _evidence(data)
    # every step a window overlapped, the warm-up's too: the default first window opens at
    # step 10, inside the 20% left out, and this count shows that it ran
    in_windows = sum(1 for i in range(1, len(t)) if profiled[i] or profiled[i - 1])
    return {"steps": len(t), "outside": outside_n / outside_s if outside_s > 0 else None, "whole": whole,
            "profiled_steps": inside, "window_steps": in_windows, "unit": "steps/s", **evidence, **_where(data)}


def _where(data: dict[str, Any]) -> dict[str, Any]:
    """Where a run's time went outside its steady steps (a run slower as a whole than its steady rate
    says): from the harness's start to the first step (imports, set-up), the steps any window
    overlapped, and the slowest step ([its index, seconds])."""
    t, profiled = data["t"], data["profiled"]
    steps = [(i, t[i] - t[i - 1]) for i in range(1, len(t))]
    slowest = max(steps, key=lambda step: step[1], default=None)
    return {"to_first_step_s": round(t[0] - data["began"], 3),
            "in_windows_s": round(sum(s for i, s in steps if profiled[i] or profiled[i - 1]), 3),
            "slowest_step": [slowest[0], round(slowest[1], 3)] if slowest else None}


def _evidence(data: dict[str, Any]) -> dict[str, Any]:
    """What the process held at its end, and its forks after the first one (the first of a run under
    diagnose may close a profiler window): the median and slowest fork in milliseconds."""
    out = {key: data[key] for key in ("threads", "cupti") if key in data}
    spans = [ms for _, ms in data.get("forks", [])[1:]]
    if spans:
        out["forks"] = len(spans) + 1
        out["fork_ms"] = [round(statistics.median(spans), 2), round(max(spans), 2)]
    return out


def startup_ms(with_agent: bool, rounds: int) -> float:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure as installed: bytecode cached
    times = []
    with tempfile.TemporaryDirectory() as session:
        if with_agent:
            env["PYTHONPATH"] = str(SITE) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            env["GPUDOCTOR_SESSION_DIR"] = session
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)  # warm the caches
        for _ in range(rounds):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per config: the median of the per-pair ratios against the plain run of the same pair."""
    plain = runs.get("plain") or []
    out: dict[str, Any] = {}
    for config, results in runs.items():
        if config == "plain":
            continue
        ratios: dict[str, list[float]] = {"outside": [], "whole": [], "per_worker_cpu": [], "gpu_step": []}
        for base, other in zip(plain, results, strict=False):
            for key in ("outside", "whole"):
                if base.get(key) and other.get(key):
                    ratios[key].append(other[key] / base[key])
            if base.get("outside") and other.get("outside") and _worker_cpu(base) and _worker_cpu(other):
                ratios["per_worker_cpu"].append(other["outside"] * _worker_cpu(other)
                                                / (base["outside"] * _worker_cpu(base)))
            if _gpu_step(base) and _gpu_step(other):
                ratios["gpu_step"].append(_gpu_step(other) / _gpu_step(base))
        out[config] = {key: round(statistics.median(v), 4) if v else None for key, v in ratios.items()}
        out[config]["pairs"] = len(ratios["outside"])
    return out


def _gpu_step(run: dict[str, Any]) -> float:
    """The host's side of a step that waits for or feeds the GPU, where the workload reports it
    (`loader_reiter`: its pageable copy, which waits for the steps queued before, and the time to
    queue the step's kernels), in ms; 0 where it does not. Under diagnose, outside the windows, it
    is the same as plain unless something of gpudoctor's stays on the GPU path (CUPTI's callbacks
    left attached to every launch)."""
    said = run.get("workload") or {}
    copy, enqueue = said.get("copy_ms_median"), said.get("enqueue_ms_median")
    return float(copy + enqueue) if isinstance(copy, (int, float)) and isinstance(enqueue, (int, float)) else 0.0


def _worker_cpu(run: dict[str, Any]) -> float:
    """The workers' CPU per batch the workload reported (ms), 0 where it did not."""
    value = (run.get("workload") or {}).get("workers_cpu_ms_per_batch")
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


def markdown(results: dict[str, Any]) -> str:
    head = (f"`benchmarks/overhead.py`, {results['machine']}, {results['date']}; medians of "
            f"{results['pairs']} alternated pair(s); ratio = throughput under `diagnose` / plain.")
    columns = ("| workload | plain | plain runs' spread | diagnose, outside the windows | ratio (outside) "
               "| ratio (whole run) | ratio x workers' CPU per batch | GPU side of a step, ratio "
               "| steps in windows (after the warm-up) |")
    lines = [head, "", columns, "|---|---|---|---|---|---|---|---|---|"]
    for name, entry in results["workloads"].items():
        runs, summary = entry["runs"], entry["summary"].get("diagnose", {})
        plain = statistics.median([r["outside"] for r in runs.get("plain", []) if r.get("outside")] or [0])
        diag = [r for r in runs.get("diagnose", []) if r.get("outside")]
        unit = (runs.get("plain") or [{}])[0].get("unit", "steps/s")
        lines.append(f"| {name} | {plain:.3g} {unit} | {_spread(runs.get('plain', []))} | "
                     f"{statistics.median([r['outside'] for r in diag]) if diag else float('nan'):.3g} | "
                     f"{_ratio(summary.get('outside'))} | {_ratio(summary.get('whole'))} | "
                     f"{_ratio(summary.get('per_worker_cpu'))} | {_ratio(summary.get('gpu_step'))} | "
                     f"{_in_windows(diag[0]) if diag else '-'} |")
    return "\n".join(lines) + "\n"


def _in_windows(run: dict[str, Any]) -> str:
    """Steps a window overlapped, all of them and those after the warm-up (older results lack the first)."""
    after = run.get("profiled_steps", 0)
    return f"{run['window_steps']} ({after})" if "window_steps" in run else str(after)


def _spread(runs: list[dict[str, Any]]) -> str:
    """How far apart the plain runs of one command were ((fastest - slowest) / median): the
    noise floor, below which no ratio of the table says anything."""
    rates = [r["outside"] for r in runs if r.get("outside")]
    if len(rates) < 2:
        return "-"
    return f"{(max(rates) - min(rates)) / statistics.median(rates):.0%}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--configs", default="plain,diagnose")
    parser.add_argument("--diagnose-env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep-runs", action="store_true",
                        help="keep each run's step stamps (and diagnose's JSON report and Session) as OUT/run-*")
    args = parser.parse_args()
    diagnose_env = dict(item.split("=", 1) for item in args.diagnose_env)
    args.out.mkdir(parents=True, exist_ok=True)
    configs = args.configs.split(",")
    try:
        import torch

        machine = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "CPU"
    except ImportError:
        machine = "CPU"
    results: dict[str, Any] = {"machine": f"{machine}, {os.cpu_count()} cores", "pairs": args.pairs,
                               "diagnose_env": diagnose_env,
                               "date": datetime.date.today().isoformat(),
                               "startup_ms": {"plain": startup_ms(False, 10), "agent": startup_ms(True, 10)},
                               "workloads": {}}
    for name in args.workloads.split(","):
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
        for pair in range(args.pairs):
            # alternated: plain first in even pairs, last in odd ones, so that whatever the
            # order favours (a GPU or CPU still warm from the run before) falls on both sides
            for config in (configs if pair % 2 == 0 else configs[::-1]):
                keep = args.out / f"run-{name}-{config}-{pair}" if args.keep_runs else None
                runs[config].append(run_once(name, config, args.out, diagnose_env, keep))
            # written after every pair: a call cut short by its time limit still brings its pairs back
            results["workloads"][name] = {"runs": runs, "summary": summarize(runs), "pairs_run": pair + 1}
            (args.out / "overhead.json").write_text(json.dumps(results, indent=1))
            (args.out / "overhead.md").write_text(markdown(results))
        print(name, json.dumps(results["workloads"][name]["summary"]), flush=True)
    print(markdown(results))


if __name__ == "__main__":
    corpus_run.stop_runs_on_sigterm()
    main()
