"""How accurate are gpudoctor's predicted gains? Diagnose each workload, apply the remedies, compare.

For every GPU workload in tests/workloads/gpu (or, with --cpu, the CPU workloads in
tests/workloads) it runs ``gpudoctor diagnose --try`` under one bound (--steps,
--duration; ``--try-only auto,compile`` where the top finding's remedy is torch.compile),
then reads: the top finding, its predicted gain, the gain its
remedy realized (the --try trial, or the workload's own fixed variant where no
override can express the fix, e.g. item_per_layer --no-item), and whether the remedy
that helped most was the top finding's. Goal (issue 12): every prediction within 30%
of the realized gain; no critical finding whose remedy realizes under 1.1x.

    python3 benchmarks/accuracy.py --out DIR            # GPU workloads (about 7 minutes on an H200)
    python3 benchmarks/accuracy.py --out DIR --cpu      # CPU workloads, anywhere

Writes DIR/accuracy.json, DIR/accuracy.md (the table for the README, with the date and
the GPU) and DIR/reports/<workload>/ (each run's JSON report, trials included).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GPU = ROOT / "tests" / "workloads" / "gpu"
CPU = ROOT / "tests" / "workloads"
WITHIN = 0.30  # |predicted / realized - 1|
CRITICAL_MIN = 1.1

COMPILE = "auto,compile"  # where the top finding's remedy is torch.compile (opt-in, and slow to compile)

# name -> (command after `gpudoctor diagnose ... `, the fixed variant's command or None, --try-only value);
# ordered by what the table needs most, in case the time budget runs out
GPU_WORKLOADS: dict[str, tuple[list[str], list[str] | None, str]] = {
    "loader_starved_gpu": ([str(GPU / "loader_overlap.py"), "--model", "tiny"], None, "auto"),
    "fp32_matmul": ([str(GPU / "fp32_matmul.py")], None, "auto"),
    "item_per_layer": ([str(GPU / "item_per_layer.py")], [str(GPU / "item_per_layer.py"), "--no-item"], "auto"),
    "tiny_kernels": ([str(GPU / "tiny_kernels.py")], None, COMPILE),
    "fragmentation": ([str(GPU / "fragmentation.py")], None, "auto"),
    "starved_loader": (["--", sys.executable, "-m", "gpudoctor.demo.workload", "--steps", "400"], None, "auto"),
    "pageable_copies": ([str(GPU / "pageable_copies.py")], None, "auto"),
    "item_sync": ([str(GPU / "item_sync.py")], None, COMPILE),
    "small_batch": ([str(GPU / "small_batch.py")], None, "auto"),
    "loader_overlap": ([str(GPU / "loader_overlap.py"), "--model", "big"], None, "auto"),
    "healthy": ([str(GPU / "healthy.py")], None, "auto"),
    "oom": ([str(GPU / "oom.py")], None, "auto"),
}
CPU_WORKLOADS: dict[str, tuple[list[str], list[str] | None, str]] = {
    "loader_waiting": ([str(CPU / "loader_waiting.py")], None, "auto"),
    "loader_starved": ([str(CPU / "loader_starved.py"), "--steps", "60"], None, "auto"),
}


def diagnose(command: list[str], out: Path, args: argparse.Namespace, deadline: float, *,
             remedies: str | None) -> tuple[dict[str, Any] | None, str]:
    """One `gpudoctor diagnose` (with --try when asked): its JSON report, or None and why."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "gpudoctor", "diagnose", "--quiet", "--interval", "0.2", "--out", f"{out}/",
            "--steps", str(args.steps), "--duration", str(args.duration)]
    if remedies:
        argv += ["--try-only", remedies]
    proc = subprocess.Popen(argv + command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=ROOT)
    try:
        _, stderr = proc.communicate(timeout=max(10.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # gpudoctor stops the workload and still writes its report
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
        stderr = "time budget reached: stopped\n" + (stderr or "")
    reports = [p for p in out.glob("*.json") if not p.name.endswith(".session.json")]
    if not reports:
        return None, f"no report (exit {proc.returncode}): {(stderr or '')[-400:]}"
    return json.loads(reports[0].read_text()), ""


def top_finding(report: dict[str, Any]) -> dict[str, Any] | None:
    findings = [f for f in report.get("findings") or [] if not f.get("consequence_of")]
    serious = [f for f in findings if f.get("severity") in ("critical", "warning")]
    return (serious or findings or [None])[0]


def _error(predicted: float | None, realized: float | None) -> float | None:
    return round(predicted / realized - 1, 3) if predicted and realized else None


def evaluate(name: str, report: dict[str, Any], fixed: dict[str, Any] | None, fixed_label: str | None
             ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The workload's row (its top finding) and one row per remedy measured."""
    top = top_finding(report)
    summary = report.get("summary") or {}
    remedies = []  # every remedy measured: the --try trials, and the fixed variant
    for trial in report.get("trials") or []:
        if trial.get("measured_gain") is not None:
            remedies.append({"workload": name, "findings": trial.get("findings") or [], "finding": trial.get("finding"),
                             "remedy": f"--try {trial['label']}", "predicted": trial.get("predicted_gain"),
                             "realized": trial["measured_gain"], "steady_steps": trial.get("steady_steps"),
                             "numerics_change": trial.get("numerics_change")})
    before = summary.get("steps_per_s")
    after = (fixed.get("summary") or {}).get("steps_per_s") if fixed is not None else None
    if top is not None and before and after:
        remedies.append(
            {
                "workload": name,
                "findings": [top["id"]],
                "finding": top["id"],
                "remedy": f"fixed variant: {fixed_label}",
                "predicted": top.get("estimated_gain"),
                "realized": round(after / before, 3),
                "steady_steps": [summary.get("steady_steps"), (fixed.get("summary") or {}).get("steady_steps")],
                "numerics_change": False,
            }
        )
    for remedy in remedies:
        remedy["error"] = _error(remedy["predicted"], remedy["realized"])
        remedy["within_30"] = abs(remedy["error"]) <= WITHIN if remedy["error"] is not None else None
    row: dict[str, Any] = {"workload": name, "verdict": summary.get("verdict"),
                           "steady_steps": summary.get("steady_steps"), "top": None}
    if top is None:
        return {**row, "note": "no finding"}, remedies
    mine = next((r for r in remedies if top["id"] in r["findings"]), None)
    best = max(remedies, key=lambda r: r["realized"], default=None)
    note = None
    if mine is None:
        note = next((u["why"] for u in report.get("untried") or [] if u.get("subject") == top["id"]), None) or \
            next((t.get("why") for t in report.get("trials") or [] if top["id"] in (t.get("findings") or [])), None)
    realized = mine["realized"] if mine else None
    return {
        **row,
        "top": top["id"],
        "severity": top.get("severity"),
        "title": top.get("title"),
        "method": (top.get("prediction") or {}).get("method"),
        "top_predicted": top.get("estimated_gain"),
        "remedy": mine["remedy"] if mine else None,
        "remedy_finding": mine["finding"] if mine else None,
        "predicted": mine["predicted"] if mine else top.get("estimated_gain"),
        "realized": realized,
        "error": mine["error"] if mine else None,
        "within_30": mine["within_30"] if mine else None,
        "critical_under_1_1": top.get("severity") == "critical" and realized is not None and realized < CRITICAL_MIN,
        "best_remedy": best["remedy"] if best else None,
        "best_gain": best["realized"] if best else None,
        "best_is_top": (top["id"] in best["findings"]) if best else None,
        "note": note,
    }, remedies


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "none"


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    head = (f"Accuracy of predicted gains, {meta['date']}, {meta['device']} (torch {meta['torch']}, "
            f"gpudoctor {meta['gpudoctor']}; every run `--steps {meta['steps']} --duration {meta['duration']:g}`, "
            f"remedies: {meta['remedies']}).")
    columns = ("| workload | top finding (predicted) | remedy applied | its prediction | realized | error "
               "| best remedy was the top's |")
    lines = [head, "", columns, "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        if row.get("top") is None:
            lines.append(f"| {row['workload']} | {row.get('note') or 'no finding'} | | | | | |")
            continue
        top = f"{row['top']} {row['severity']} ({_x(row.get('top_predicted'))}, {row.get('method')})"
        remedy = row.get("remedy") or f"not tried: {row.get('note') or 'no remedy measured'}"
        source = (
            f" ({row['remedy_finding']})" if row.get("remedy_finding") and row["remedy_finding"] != row["top"] else ""
        )
        err = f"{row['error']:+.0%}" if row.get("error") is not None else ""
        best = "" if row.get("best_is_top") is None else ("yes" if row["best_is_top"] else f"no: {row['best_remedy']}")
        real = _x(row["realized"]) if row.get("realized") is not None else "not measured"
        lines.append(
            f"| {row['workload']} | {top} | {_cell(remedy)} | {_x(row.get('predicted')) if row.get('remedy') else ''}"
            f"{source} | {real} | {err} | {_cell(best)} |"
        )
    lines += ["", "Every remedy measured:", "", "| workload | finding | remedy | predicted | realized | error |",
              "|---|---|---|---|---|---|"]
    for r in result["remedies"]:
        err = f"{r['error']:+.0%}" if r.get("error") is not None else ""
        numerics = " (changes numerics)" if r.get("numerics_change") else ""
        lines.append(f"| {r['workload']} | {r.get('finding') or 'asked for'} | {_cell(r['remedy'])}{numerics} | "
                     f"{_x(r.get('predicted'))} | {_x(r['realized'])} | {err} |")
    goal = result["goal"]
    critical = ", ".join(goal["critical_under_1_1"]) or "none"
    lines += ["", (f"Predictions within 30% of the realized gain: {goal['within_30']} of {goal['compared']}; "
                   f"critical top findings whose remedy realized under 1.1x: {critical}.")]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "/")


def device_name(reports: list[dict[str, Any]]) -> str:
    for report in reports:
        gpus = (report.get("environment") or {}).get("gpus") or []
        if gpus and gpus[0].get("name"):
            return str(gpus[0]["name"])
    return f"CPU only ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for accuracy.json, accuracy.md and reports/")
    parser.add_argument("--cpu", action="store_true", help="the CPU workloads of tests/workloads instead")
    parser.add_argument("--only", nargs="*", help="these workloads only")
    parser.add_argument("--steps", type=int, default=400, help="steps per run at most (default 400)")
    parser.add_argument("--duration", type=float, default=20.0,
                        help="seconds per run at most (default 20; a compile trial gets 60 more)")
    parser.add_argument("--budget", type=float, default=420.0,
                        help="seconds for everything (default 420): later workloads are left out, the run in "
                             "progress is stopped and reported")
    parser.add_argument("--remedies", help="--try-only value for every workload (default: auto, and "
                                           "auto,compile where the top finding's remedy is torch.compile)")
    args = parser.parse_args()
    out = Path(args.out)
    (out / "reports").mkdir(parents=True, exist_ok=True)
    workloads = CPU_WORKLOADS if args.cpu else GPU_WORKLOADS
    start = time.time()
    deadline = start + args.budget
    rows: list[dict[str, Any]] = []
    remedies: list[dict[str, Any]] = []
    reports: list[dict[str, Any]] = []
    for name, (command, fixed_command, remedies_for) in workloads.items():
        if args.only and name not in args.only:
            continue
        if time.time() > deadline - 20:
            rows.append({"workload": name, "top": None, "note": "not run: time budget"})
            continue
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.time()
            report, error = diagnose(command, Path(tmp) / "run", args, deadline, remedies=args.remedies or remedies_for)
            fixed = None
            if report is not None and fixed_command is not None and time.time() < deadline - 20:
                fixed, _ = diagnose(fixed_command, Path(tmp) / "fixed", args, deadline, remedies=None)
            keep = out / "reports" / name
            shutil.rmtree(keep, ignore_errors=True)
            for path in Path(tmp).rglob("*.json"):
                if not path.name.endswith(".session.json"):
                    target = keep / path.relative_to(tmp)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, target)
        if report is None:
            rows.append({"workload": name, "top": None, "note": error})
        else:
            reports.append(report)
            label = " ".join(fixed_command[len(command):]) if fixed_command else None
            row, measured = evaluate(name, report, fixed, label)
            rows.append(row)
            remedies.extend(measured)
        row = rows[-1]
        print(f"{name}: {time.time() - t0:.0f}s; top {row.get('top')} predicted {row.get('predicted')} "
              f"realized {row.get('realized')} ({row.get('remedy') or row.get('note')})", flush=True)
    compared = [r for r in remedies if r.get("within_30") is not None]
    result = {
        "meta": {"date": datetime.date.today().isoformat(), "device": device_name(reports),
                 "torch": next(((r.get("environment") or {}).get("torch") for r in reports), None),
                 "gpudoctor": next(((r.get("tool") or {}).get("version") for r in reports), None),
                 "steps": args.steps, "duration": args.duration,
                 "remedies": f"--try-only {args.remedies}" if args.remedies else
                 f"--try (--try-only {COMPILE} for tiny_kernels, item_sync)",
                 "seconds": round(time.time() - start, 1), "python": platform.python_version()},
        "goal": {"compared": len(compared), "within_30": sum(1 for r in compared if r["within_30"]),
                 "critical_under_1_1": [r["workload"] for r in rows if r.get("critical_under_1_1")]},
        "rows": rows,
        "remedies": remedies,
    }
    (out / "accuracy.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "accuracy.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
