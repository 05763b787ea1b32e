"""Record the CPU torch.profiler traces of tests/fixtures/cpu_traces (run on any machine, no GPU).

    python scripts/record_cpu_traces.py [--out tests/fixtures/cpu_traces]

Each trace is the input-bound loop of tests/workloads/input_bound_entry.py (heavy per-sample
work in __getitem__) profiled with torch.profiler's tensorboard_trace_handler, as a user
of the TensorBoard profiler plugin records one, then gzipped under a stable name:

    input_bound.pt.trace.json.gz            num_workers=0, schedule + prof.step() (ProfilerStep#N)
    input_bound_unmarked.pt.trace.json.gz   num_workers=0, prof.start()/stop(): no ProfilerStep ranges
    input_bound_workers1.pt.trace.json.gz   num_workers=1 (_MultiProcessingDataLoaderIter), ProfilerStep#N

The events are kept as recorded; only the host name and the temporary directory are replaced.
"""

from __future__ import annotations

import argparse
import gzip
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "tests" / "workloads" / "input_bound_entry.py"
TRACES = {  # name -> the workload's arguments
    "input_bound": ["--workers", "0"],
    "input_bound_unmarked": ["--workers", "0", "--unmarked"],
    "input_bound_workers1": ["--workers", "1"],
}
STEPS = "16"  # 13 profiled steps after the schedule's wait and warm-up: more than 10 steady ones


def record(name: str, args: list[str], out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="gpudoctor-cpu-trace-") as tmp:
        subprocess.run([sys.executable, str(WORKLOAD), "profile", "--steps", STEPS, "--trace", tmp, *args],
                       check=True)
        traces = sorted(Path(tmp).glob("*.pt.trace.json"))
        if len(traces) != 1:
            raise SystemExit(f"{name}: expected one trace, got {[t.name for t in traces]}")
        text = re.sub(r'("host_name":\s*)"[^"]*"', r'\1"cpu-host"', traces[0].read_text())
        text = text.replace(tmp, "traces")  # the recording's temporary directory
    target = out / f"{name}.pt.trace.json.gz"
    target.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "cpu_traces")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, workload_args in TRACES.items():
        print(record(name, workload_args, args.out))


if __name__ == "__main__":
    main()
