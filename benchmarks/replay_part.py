"""How far the replay of a long window's latest part is from the replay of the whole.

A window of more than replay.window.REPLAY_MAX_EVENTS events is replayed over its latest
stretch within that budget. This replays one trace whole and with the shipped budget and
two smaller ones, and prints each scenario's predicted gain, the steps covered, the
replayed step time and the replay's own time:

    python3 tests/workloads/gpu/long_window.py /tmp/long.json 60     # on a GPU machine
    python3 benchmarks/replay_part.py /tmp/long.json --out replay_part.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from gpudoctor.collectors.trace_decode import read_trace
from gpudoctor.replay import scenarios, window


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--out", type=Path, help="also write the rows here (JSON)")
    args = parser.parse_args()
    index = read_trace(args.trace)
    steps = window.profiler_steps(index)
    total = len(index.gpu) + len(index.api) + len(index.ops) + len(index.frames)
    rows = []
    shipped = window.REPLAY_MAX_EVENTS
    for budget in (total, shipped, shipped * 2 // 3, shipped // 3):
        part = window.latest_stretch(index, steps, budget)[0]
        if part is index:  # the whole window: marked as chosen, or replay_trace would cut it to the shipped budget
            index.part = (steps, "")
        start = time.perf_counter()
        summary = scenarios.replay_trace(part, steps)
        if summary is None or summary.error or not summary.baseline_span_us:
            print(f"budget {budget:,}: no replay ({summary.error if summary else 'no host thread'})")
            continue
        index.part = None
        row = {"budget": budget, "seconds": round(time.perf_counter() - start, 2), "steps": summary.steps,
               "scope": summary.scope or "the whole window", "replayed_ms": round(summary.baseline_span_us / 1e3, 3),
               "ms_per_step": round(summary.baseline_span_us / summary.steps / 1e3, 3) if summary.steps else None,
               "gains": {s.name: round(summary.baseline_span_us / s.span_us, 3) for s in summary.scenarios}}
        rows.append(row)
        print(json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps({"trace": str(args.trace), "events": total, "steps": steps, "runs": rows},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
