"""Where a `gpudoctor sweep` spends its wall time: by search phase, by trial, by trial phase.

Runs the sweep (or reads a finished sweep's JSON) and prints, per trial in run order,
whether its process was reused and the seconds of each phase (close_previous: ending
the last process; start: a fresh process up to torch imported; load: device and CUDA
context; build: the target; warmup; measure; fit_check: a fit probe's few untimed
steps, in place of warmup and measure; call: the sweep's whole wait for the
answer; reused_attempt: a first run in a reused process that failed), then the
totals of the doubling phase (the sizes measured in full before the first
out-of-memory) and of the edge search (fit probes past the knee, and every size from
the first out-of-memory on), and the fixed cost (call minus warmup and measure) that
process reuse removes.

    python benchmarks/sweep_phases.py -- examples/sweep_targets.py:resnet --mode train
    python benchmarks/sweep_phases.py --fresh -- examples/sweep_targets.py:resnet --mode train
    python benchmarks/sweep_phases.py --report gpudoctor-reports/sweep-phases/reused.json

`--fresh` adds --fresh-process-per-size (every size in a new process, as before reuse)
for the comparison; give the sweep `--no-edge-prediction` (after --) for the previous
search (every doubling size in full to the first out-of-memory, then midpoints).
`--json PATH` also writes the summary as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PHASES = ("reused_attempt", "close_previous", "start", "load", "build", "warmup", "measure", "fit_check", "call")


def run_sweep(sweep_args: list[str], out: Path, fresh: bool) -> tuple[Path, float]:
    stem = out / ("fresh" if fresh else "reused")
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "gpudoctor", "sweep", *sweep_args, "--out", str(stem), "--force"]
    if fresh:
        command.append("--fresh-process-per-size")
    print("$", " ".join(command), file=sys.stderr, flush=True)
    started = time.perf_counter()
    code = subprocess.call(command)
    wall = time.perf_counter() - started
    if code not in (0, 1):
        raise SystemExit(f"the sweep exited with status {code}")
    return Path(f"{stem}.json"), wall


def summarize(report: dict[str, Any], wall_s: float | None) -> dict[str, Any]:
    ran = sorted((t for t in report["trials"] if t.get("order") is not None), key=lambda t: t["order"])
    first_oom = next((t["order"] for t in ran if t["status"] == "oom"), None)
    rows, phases = [], {"doubling": 0.0, "edge": 0.0}
    totals = dict.fromkeys((*PHASES, "fixed"), 0.0)
    for trial in ran:
        times = trial.get("phase_s") or {}
        # a size that failed in a reused process and ran again fresh: both runs count
        call = times.get("call", trial.get("duration_s") or 0.0) + times.get("reused_attempt", 0.0)
        fixed = call - times.get("warmup", 0.0) - times.get("measure", 0.0) - times.get("fit_check", 0.0)
        before_oom = first_oom is None or trial["order"] < first_oom
        phase = "doubling" if before_oom and not trial.get("fit_probe") else "edge"
        phases[phase] += call
        for name in PHASES:
            totals[name] += times.get(name, 0.0)
        totals["fixed"] += fixed
        rows.append({
            "order": trial["order"], "batch_size": trial["batch_size"], "status": trial["status"],
            "search_phase": phase, "fit_probe": bool(trial.get("fit_probe")),
            "process_reused": trial.get("process_reused"), "reuse_fallback": trial.get("reuse_fallback"),
            "phase_s": times, "fixed_s": round(fixed, 3),
        })
    return {
        "target": report["target"]["spec"], "mode": report["target"]["mode"], "command": report["command"],
        "wall_s": round(wall_s, 3) if wall_s is not None else None, "report_duration_s": report["duration_s"],
        "search_phases_s": {k: round(v, 3) for k, v in phases.items()},
        "phase_totals_s": {k: round(v, 3) for k, v in totals.items()},
        "trials_run": len(ran), "processes_reused": sum(1 for r in rows if r["process_reused"]),
        "fit_probes": sum(1 for r in rows if r["fit_probe"]),
        "stop_reason": report["stop_reason"], "knee": report["results"]["knee"]["batch_size"],
        "memory_edge": [report["results"]["memory_edge"].get("largest_fit"),
                        report["results"]["memory_edge"].get("smallest_oom")],
        "trials": rows,
    }


def show(summary: dict[str, Any]) -> None:
    print(f"\n{' '.join(summary['command'])}")
    header = f"{'#':>3} {'batch':>6} {'status':>10} {'reused':>6} " + " ".join(f"{p[:8]:>8}" for p in PHASES)
    print(header + f" {'fixed':>8}")
    for row in summary["trials"]:
        times = row["phase_s"]
        cells = " ".join(f"{times[p]:8.2f}" if p in times else f"{'-':>8}" for p in PHASES)
        reused = {True: "yes", False: "no", None: "?"}[row["process_reused"]]
        probe = " probe" if row["fit_probe"] else ""
        print(f"{row['order']:>3} {row['batch_size']:>6} {row['status']:>10} {reused:>6} {cells} "
              f"{row['fixed_s']:8.2f}{probe}")
    totals = summary["phase_totals_s"]
    print("sum" + " " * 25 + " ".join(f"{totals[p]:8.2f}" for p in PHASES) + f" {totals['fixed']:8.2f}")
    wall = f"{summary['wall_s']:.1f} s wall, " if summary["wall_s"] is not None else ""
    phases = summary["search_phases_s"]
    print(f"\n{wall}{summary['report_duration_s']:.1f} s in the sweep; doubling {phases['doubling']:.1f} s, "
          f"edge search {phases['edge']:.1f} s; {summary['trials_run']} trials ({summary['fit_probes']} fit probes), "
          f"{summary['processes_reused']} in a reused process; fixed cost {totals['fixed']:.1f} s")
    print(f"knee {summary['knee']}, memory edge between {summary['memory_edge'][0]} and "
          f"{summary['memory_edge'][1]}; {summary['stop_reason']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--report", type=Path, help="summarize this sweep JSON instead of running one")
    parser.add_argument("--fresh", action="store_true", help="run with --fresh-process-per-size")
    parser.add_argument("--out", type=Path, default=Path("gpudoctor-reports/sweep-phases"), help="report folder")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    parser.add_argument("sweep_args", nargs="*", help="after --: the sweep's TARGET and options")
    args = parser.parse_args(argv)
    if args.report:
        path, wall = args.report, None
    elif args.sweep_args:
        path, wall = run_sweep(args.sweep_args, args.out, args.fresh)
    else:
        parser.error("give the sweep's arguments after --, or --report PATH")
    summary = summarize(json.loads(path.read_text()), wall)
    show(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
