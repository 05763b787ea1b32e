"""Run every GPU workload in tests/workloads/gpu under `gpudoctor diagnose` and keep the Sessions.

Used on the GPU machine to (re)record the fixtures that CPU tests assert on:

    python scripts/record_gpu_fixtures.py --out DIR [--only NAME ...]

For each workload it writes DIR/<name>.session.json (the recorded Session),
DIR/<name>.report.json and DIR/<name>.html, and prints one line: the top finding
and the key numbers. A summary goes to DIR/summary.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "tests" / "workloads" / "gpu"

# fixture name -> (workload file in tests/workloads/gpu, its arguments)
RUNS: dict[str, tuple[str, list[str]]] = {
    "tiny_kernels": ("tiny_kernels", []),
    "item_sync": ("item_sync", []),
    "pageable_copies": ("pageable_copies", []),
    "fp32_matmul": ("fp32_matmul", []),
    "fragmentation": ("fragmentation", []),
    "oom": ("oom", []),
    "small_batch": ("small_batch", []),
    "healthy": ("healthy", []),
    "starved_loader": ("starved_loader", []),
    "loader_overlap": ("loader_overlap", ["--model", "big"]),
    "loader_starved_gpu": ("loader_overlap", ["--model", "tiny"]),
    "item_per_layer": ("item_per_layer", []),
    # issue 11: runs that marked no step or had no window before; about 90 s together on an H200
    "infer_10s": ("infer_10s", []),
    "small_copies": ("small_copies", []),
    "backward_only": ("backward_only", []),
    "phases": ("phases", []),
}
# extra `gpudoctor diagnose` options per run
DIAGNOSE_OPTIONS: dict[str, list[str]] = {
    "phases": ["--profile-later", "4"],  # a later window in the second epoch, not only after 60 s
}
# the same workloads with the remedy applied by hand: what the prediction is checked against
REMEDIED: dict[str, tuple[str, list[str]]] = {
    "loader_overlap+workers8": ("loader_overlap", ["--model", "big", "--workers", "8"]),
    "loader_starved_gpu+workers15": ("loader_overlap", ["--model", "tiny", "--workers", "15"]),
    "item_per_layer+no_item": ("item_per_layer", ["--no-item"]),
}


def command_for(name: str) -> list[str]:
    if name == "starved_loader":  # the demo workload: a CPU-starved loader feeding a GPU
        return ["--", sys.executable, "-m", "gpudoctor.demo.workload", "--steps", "80"]
    script, arguments = {**RUNS, **REMEDIED}[name]
    return [str(WORKLOADS / f"{script}.py"), *arguments]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--remedied", action="store_true", help="also run the remedied variants (realized gains)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    names = list(RUNS) + (list(REMEDIED) if args.remedied else [])
    for name in names:
        if args.only and name not in args.only and name.split("+")[0] not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            start = time.time()
            proc = subprocess.run(
                [sys.executable, "-m", "gpudoctor", "diagnose", "--quiet", "--interval", "0.2", "--out", f"{tmp}/",
                 *DIAGNOSE_OPTIONS.get(name, []), *command_for(name)],
                capture_output=True, text=True, timeout=300,
            )
            elapsed = time.time() - start
            reports = [p for p in Path(tmp).glob("*.json") if not p.name.endswith(".session.json")]
            if not reports:
                print(f"{name}: NO REPORT (exit {proc.returncode})\n{proc.stderr[-3000:]}", flush=True)
                summary[name] = {"exit": proc.returncode, "error": proc.stderr[-3000:]}
                continue
            report = json.loads(reports[0].read_text())
            shutil.copy(reports[0], out / f"{name}.report.json")
            for session in Path(tmp).glob("*.session.json"):
                shutil.copy(session, out / f"{name}.session.json")
            for html in Path(tmp).glob("*.html"):
                shutil.copy(html, out / f"{name}.html")
            for trace in Path(tmp).glob("*.trace.json.gz"):
                shutil.copy(trace, out / f"{name}.trace.json.gz")
        session_data = (
            json.loads((out / f"{name}.session.json").read_text()) if (out / f"{name}.session.json").exists() else {}
        )
        windows = [
            (w.get("index"), w.get("label"), w.get("step_source"), w.get("steps"), w.get("kernel_count"))
            for w in session_data.get("profiles") or []
        ]
        findings = [
            (
                f["id"],
                f["severity"],
                f.get("estimated_gain"),
                (f.get("prediction") or {}).get("method"),
                f.get("consequence_of"),
            )
            for f in report["findings"]
        ]
        entry = {
            "exit": proc.returncode,
            "seconds": round(elapsed, 1),
            "verdict": report["summary"].get("verdict"),
            "findings": findings,
            "top": report["findings"][0] if report["findings"] else None,
            "summary": report["summary"],
            "skipped": {
                c["id"]: c["reason"] for c in report["checks"] if c["status"] != "pass" and c["status"] != "finding"
            },
            "step_source": (session_data.get("steps") or {}).get("source"),
            "windows": windows,
        }
        summary[name] = entry
        top = entry["top"]
        print(f"{name}: exit {proc.returncode} in {elapsed:.0f}s; {report['summary'].get('verdict')}", flush=True)
        print(f"  findings: {findings}", flush=True)
        print(
            f"  steps from: {entry['step_source']}; windows (index, label, source, steps, kernels): {windows}",
            flush=True,
        )
        if top:
            print(f"  top: {top['id']} {top['title']} | {top['message'][:400]} | from {top.get('window')}", flush=True)
        if proc.returncode not in (0, 1):
            print(proc.stderr[-2000:], flush=True)
    for name in REMEDIED:
        base = name.split("+")[0]
        if name in summary and base in summary and "summary" in summary[name] and "summary" in summary[base]:
            before, after = summary[base]["summary"].get("steps_per_s"), summary[name]["summary"].get("steps_per_s")
            if before and after:
                print(f"realized {name}: {before:.2f} -> {after:.2f} steps/s = {after / before:.2f}x", flush=True)
                summary[name]["realized_gain"] = after / before
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()
