"""How long the statistics and hotspots of `gpudoctor analyze` take once a trace is decoded.

Builds the big trace analyze_speed.py builds (copies of a committed H200 window end to end,
1,036,758 events by default) unless given one, decodes it once, then times
``trace._summarize(index, 0)`` (garbage collection off, as `analyze` runs it) --repeat
times and prints the median, with the parts: the columns taken out of the events, the
statistics and the hotspots.

    .venv/bin/python benchmarks/summarize_speed.py [--trace BIG.json] [--events N] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from analyze_speed import build_trace

from gpudoctor.collectors import hotspots, trace
from gpudoctor.collectors.trace_decode import read_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, help="a trace to time (default: build one)")
    parser.add_argument("--events", type=int, default=1_036_758)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = args.trace
        if path is None:
            path = Path(scratch) / "big.json"
            build_trace(args.events, path)
        index = read_trace(path)
    gc.disable()
    totals, parts = [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        trace._summarize(index, 0)
        totals.append(time.perf_counter() - start)
        stats = trace._TraceStats()
        marks = [time.perf_counter()]
        stats.add(index)
        columns = stats.columns
        assert columns is not None
        columns.operators, columns.frames  # noqa: B018  (taken here, timed apart)
        marks.append(time.perf_counter())
        stats.add_context(index)
        summary = stats.summary(0)
        marks.append(time.perf_counter())
        hotspots.add_hotspots(index, summary, columns=columns)
        marks.append(time.perf_counter())
        parts.append([b - a for a, b in pairwise(marks)])
    print(f"{index.events:,} complete events: _summarize median {statistics.median(totals):.3f} s "
          f"(runs: {', '.join(f'{t:.3f}' for t in totals)})")
    for name, column in zip(("columns", "statistics", "hotspots"), zip(*parts)):
        print(f"  {name:<10} median {statistics.median(column):.3f} s")


if __name__ == "__main__":
    main()
