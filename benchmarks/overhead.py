"""Measure what gpudoctor costs the workload it watches.

For a CPU-bound loop (and a GPU-bound loop when a GPU is present) it runs the same
fixed number of steps plain, under `gpudoctor diagnose --no-profile` (sampling
only) and under `gpudoctor diagnose` (sampling + the profiler window), alternating
the three configurations for several rounds, and compares the loop's own timing
(printed by the workload). It also measures interpreter start-up with the agent
injected (it must cost a few milliseconds at most), and the profile of a loader
worker (cProfile over 8 batches of one worker, taken when the loop waits for data): an
input-bound loop with one worker, under `diagnose --no-profile` with and without
`--no-loader-profile`, and the profiled batches' time against the others'.

    python benchmarks/overhead.py [--rounds 5] [--steps 300] [--json out.json] [--cases cpu,cuda,loader]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = ROOT / "tests" / "workloads" / "bench_loop.py"
SITE = ROOT / "gpudoctor" / "agent" / "_site"


def loop_time(command: list[str]) -> float:
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return float(json.loads(line)["loop_s"])
    raise RuntimeError(f"no timing in output of {command}")


def startup_ms(with_agent: bool, rounds: int) -> float:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure as installed: bytecode cached
    times = []
    with tempfile.TemporaryDirectory() as session:
        if with_agent:
            env["PYTHONPATH"] = str(SITE)
            env["GPUDOCTOR_SESSION_DIR"] = session
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)  # warm the caches
        for _ in range(rounds):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def loader_case(rounds: int, steps: int) -> dict[str, object]:
    """What profiling one loader worker costs an input-bound loop."""
    base = [sys.executable, str(LOOP), "--device", "cpu", "--steps", str(steps), "--loader-workers", "1"]
    timings: dict[str, list[float]] = {"plain": [], "no_loader_profile": [], "loader_profile": []}
    batch_ratio: list[float] = []
    for _ in range(rounds):
        for name in timings:
            with tempfile.TemporaryDirectory() as out:
                extra = ["--no-loader-profile"] if name == "no_loader_profile" else []
                command = base if name == "plain" else [
                    sys.executable, "-m", "gpudoctor", "diagnose", "--quiet", "--no-profile", *extra,
                    "--out", f"{out}/", "--", *base]
                timings[name].append(loop_time(command))
                if name == "loader_profile":
                    ratio = profiled_batch_ratio(Path(out))
                    if ratio is not None:
                        batch_ratio.append(ratio)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    return {
        "steps": steps,
        "loop_s_median": medians,
        "loop_s_all": timings,
        "overhead_loader_profile_pct": 100 * (medians["loader_profile"] / medians["no_loader_profile"] - 1),
        "profiled_batch_slowdown": statistics.median(batch_ratio) if batch_ratio else None,
        "profiled_batch_slowdown_all": batch_ratio,
    }


def profiled_batch_ratio(out: Path) -> float | None:
    """Time of a profiled batch over the time of the loader's other batches, from the Session."""
    sessions = list(out.glob("*.session.json"))
    if not sessions:
        return None
    for loader in json.loads(sessions[0].read_text()).get("loaders") or []:
        profile = loader.get("fetch_profile")
        if not profile or not profile.get("batches"):
            continue
        rest_batches = loader["fetch_batches"] - profile["batches"]
        if rest_batches <= 0:
            continue
        rest = (loader["fetch_wall_s"] - profile["wall_s"]) / rest_batches
        return (profile["wall_s"] / profile["batches"]) / rest if rest > 0 else None
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--devices", default="cpu,cuda")
    parser.add_argument("--cases", default="devices,loader", help="devices (the loops above), loader")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    results: dict[str, object] = {
        "startup_ms_plain": startup_ms(False, 20),
        "startup_ms_agent": startup_ms(True, 20),
    }
    devices = args.devices.split(",")
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    with tempfile.TemporaryDirectory() as out:
        for device in devices if "devices" in args.cases else []:
            if device == "cuda" and not has_cuda:
                continue
            base = [sys.executable, str(LOOP), "--device", device, "--steps", str(args.steps)]
            configs = {
                "plain": base,
                "sampling": [sys.executable, "-m", "gpudoctor", "diagnose", "--quiet", "--no-profile",
                             "--out", out, "--force", "--", *base],
                "profiler": [sys.executable, "-m", "gpudoctor", "diagnose", "--quiet", "--out", out, "--force",
                             "--", *base],
            }
            timings: dict[str, list[float]] = {name: [] for name in configs}
            for _ in range(args.rounds):
                for name, command in configs.items():
                    timings[name].append(loop_time(command))
            medians = {name: statistics.median(values) for name, values in timings.items()}
            results[device] = {
                "steps": args.steps,
                "loop_s_median": medians,
                "loop_s_all": timings,
                "overhead_sampling_pct": 100 * (medians["sampling"] / medians["plain"] - 1),
                "overhead_profiler_pct": 100 * (medians["profiler"] / medians["plain"] - 1),
            }
    if "loader" in args.cases:
        results["loader"] = loader_case(args.rounds, args.steps)
    text = json.dumps(results, indent=2)
    print(text)
    if args.json_path:
        Path(args.json_path).write_text(text)


if __name__ == "__main__":
    main()
