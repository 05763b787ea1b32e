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

# workload -> extra diagnose options
RUNS: dict[str, list[str]] = {
    "tiny_kernels": [],
    "item_sync": [],
    "pageable_copies": [],
    "fp32_matmul": [],
    "fragmentation": [],
    "oom": [],
    "small_batch": [],
    "healthy": [],
    "starved_loader": [],
}


def command_for(name: str) -> list[str]:
    if name == "starved_loader":  # the demo workload: a CPU-starved loader feeding a GPU
        return ["--", sys.executable, "-m", "gpudoctor.demo.workload", "--steps", "80"]
    return [str(WORKLOADS / f"{name}.py")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name, extra in RUNS.items():
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            start = time.time()
            proc = subprocess.run(
                [sys.executable, "-m", "gpudoctor", "diagnose", "--quiet", "--interval", "0.2", "--out", f"{tmp}/", *extra,
                 *command_for(name)],
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
        findings = [(f["id"], f["severity"], f.get("consequence_of")) for f in report["findings"]]
        entry = {
            "exit": proc.returncode,
            "seconds": round(elapsed, 1),
            "verdict": report["summary"].get("verdict"),
            "findings": findings,
            "top": report["findings"][0] if report["findings"] else None,
            "summary": report["summary"],
            "skipped": {c["id"]: c["reason"] for c in report["checks"] if c["status"] != "pass" and c["status"] != "finding"},
        }
        summary[name] = entry
        top = entry["top"]
        print(f"{name}: exit {proc.returncode} in {elapsed:.0f}s; {report['summary'].get('verdict')}", flush=True)
        print(f"  findings: {findings}", flush=True)
        if top:
            print(f"  top: {top['id']} {top['title']} | {top['message'][:400]}", flush=True)
        if proc.returncode not in (0, 1):
            print(proc.stderr[-2000:], flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()
