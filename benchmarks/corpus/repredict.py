"""Predict the accuracy corpus again from its kept sessions, without the GPU (issue 25).

    python benchmarks/corpus/repredict.py DIR [--out DIR2] [--only a,b] [--manifest FILE]

DIR holds a corpus.json (run.py's output, or benchmarks/corpus/results/h200/) and the
bundles its entries name (keep.py: sessions-*.tar, traces-*.tar). For each entry whose
Session was kept, with this checkout's gpudoctor:

1. the primary profiler window is replayed again from the kept trace, calibrated to the
   steps measured outside it, as the Session's assembly does (the other windows keep the
   replay they were recorded with: diagnose keeps only the primary window's trace);
2. the checks run on the Session: the judge `gpudoctor report SESSION` uses;
3. each remedy's prediction is read from the new report (score.prediction, the remedy's
   targets as the manifest has them now) and judged again against its realized gain,
   which stays as measured. A row's first prediction stays in `diagnosed`.

Entries without a kept Session (measured before sessions were kept, or whose diagnose
failed) keep their predictions; meta.repredicted names them and why. Writes
DIR2/corpus.json and DIR2/corpus.md (default: DIR itself); the bundles stay where they are.
"""

from __future__ import annotations

import argparse
import datetime
import json
import runpy
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import manifest
from keep import read_member
from manifest import Remedy, Workload
from run import checkout_commit, gpudoctor_version, write
from score import judge, prediction, top_finding


def replay_primary(session: Any, trace: Path) -> str:
    """Replay SESSION's primary window again from TRACE, in place; what was done, in words."""
    from gpudoctor.collectors.trace_decode import read_trace
    from gpudoctor.collectors.windows import primary_calibration_steps
    from gpudoctor.replay import replay_or_error
    from gpudoctor.session import ReplaySummary

    profile = session.profile
    if profile is None:
        return "no profiler window: nothing to replay"
    # the Session holds the primary window twice (profile, and among profiles): both get the new replay
    twins = [p for p in session.profiles if p == profile]
    replay: ReplaySummary | None
    if profile.kernel_count == 0 and profile.gpu_busy_us <= 0:
        replay = ReplaySummary(steps=profile.steps, error="a CPU-only window: no GPU work to replay")
        what = "not replayed: a CPU-only window"
    else:
        replay = replay_or_error(read_trace(trace, own_window=True), profile.steps,
                                 primary_calibration_steps(session), source=profile.step_source)
        what = "primary window replayed again"
    profile.replay = replay
    for twin in twins:
        twin.replay = replay
    others = len([p for p in session.windows() if p is not profile])
    return what + (f"; {others} other window(s) as recorded (no trace kept)" if others else "")


def primary_moved(session: Any) -> str:
    """Where this checkout takes another window for the primary one than the recorded Session did (the
    first window of the run's own steps, collectors.windows.primary_index), make it the primary, with
    its replay as recorded (the kept trace is the other window's); what was done, in words ("": nothing)."""
    from gpudoctor.collectors.windows import primary_index

    profiles, recorded = session.profiles, session.profile
    if recorded is None or len(profiles) < 2:
        return ""
    now = profiles[primary_index([p.step_source for p in profiles], session.steps.source)]
    if now == recorded:
        return ""
    session.profile = now
    return (f"primary window now {now.label or 'another'} ({now.phase or now.step_source}: the run's own steps), "
            f"recorded {recorded.label or 'another'} ({recorded.phase or recorded.step_source}); its replay as "
            "recorded (the kept trace is the other window's)")


def predict_again(directory: Path, kept: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The report of a kept Session judged by this checkout, and what became of its replay."""
    from gpudoctor.session import Session
    from gpudoctor.verdict.judge import judge as judge_session

    session = Session.from_dict(json.loads(read_member(directory, kept["sessions"], kept["session"])))
    bundle = directory / str(kept.get("traces"))
    moved = primary_moved(session)
    if moved:
        how = moved
    elif kept.get("traces") and kept.get("trace") and not bundle.exists():
        how = f"replay as recorded: {bundle.name} did not come back from the GPU machine"
    elif kept.get("traces") and kept.get("trace"):
        with tempfile.TemporaryDirectory(prefix="gd-repredict-") as scratch:
            trace = Path(scratch) / "window.trace.json"
            trace.write_bytes(read_member(directory, kept["traces"], kept["trace"]))
            try:
                how = replay_primary(session, trace)
            except Exception as exc:  # noqa: BLE001 (the recorded replay stands; the row says why)
                how = f"replay failed ({type(exc).__name__}: {exc}); the recorded replay kept"
    else:
        how = "replay as recorded: " + str(kept.get("why_no_trace") or "no window trace kept")
    return judge_session(session).report, how


def remedy_for(row: dict[str, Any], workloads: dict[str, Workload]) -> Remedy:
    """The manifest's remedy of ROW (its targets may have been corrected since), else the row's own."""
    workload = workloads.get(row["workload"])
    for remedy in workload.remedies if workload else ():
        if remedy.name == row["remedy"]:
            return remedy
    return Remedy(row["remedy"], tuple(row.get("targets") or ()))


def repredict_entry(entry: dict[str, Any], directory: Path, workloads: dict[str, Workload],
                    stamp: dict[str, Any]) -> str | None:
    """ENTRY's predictions made again, in place; None when done, else why it could not be."""
    kept = entry.get("kept") or {}
    if not kept.get("sessions") or not kept.get("session"):
        return str(kept.get("why") or "no session kept")
    try:
        report, how = predict_again(directory, kept)
    except (OSError, KeyError, ValueError) as exc:
        return f"the kept session could not be read: {type(exc).__name__}: {exc}"
    if entry.get("diagnose") is None:
        entry["diagnose"] = {}
    entry["diagnose"].update(top=top_finding(report), verdict=(report.get("summary") or {}).get("verdict"))
    for row in entry.get("remedies") or []:
        row.setdefault("diagnosed", {k: row.get(k) for k in ("predicted", "method", "finding", "named")})
        remedy = remedy_for(row, workloads)
        row.update(prediction(report, remedy), targets=list(remedy.targets))
        judge(row)
    entry["prediction"] = {**stamp, "replay": how}
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="a corpus output: corpus.json and the bundles it names")
    parser.add_argument("--out", type=Path, help="where to write corpus.json and corpus.md (default: DIRECTORY)")
    parser.add_argument("--only", help="comma-separated workload names (the others are left as they are)")
    parser.add_argument("--manifest", type=Path, help="a Python file defining WORKLOADS (default: manifest.py)")
    args = parser.parse_args(argv)
    results = json.loads((args.directory / "corpus.json").read_text())
    listed = tuple(runpy.run_path(str(args.manifest))["WORKLOADS"]) if args.manifest else manifest.WORKLOADS
    workloads = {w.name: w for w in listed}
    only = set(args.only.split(",")) if args.only else None
    stamp = {"by": "repredict", "date": datetime.date.today().isoformat(), "gpudoctor": gpudoctor_version(),
             "commit": checkout_commit()}
    done: list[str] = []
    not_done: dict[str, str] = {}
    for entry in results["workloads"]:
        if only is not None and entry["workload"] not in only:
            continue
        why = repredict_entry(entry, args.directory, workloads, stamp)
        if why is None:
            done.append(entry["workload"])
        else:
            not_done[entry["workload"]] = why
        print(f"repredict: {entry['workload']}: {why or entry['prediction']['replay']}", file=sys.stderr, flush=True)
    results["meta"]["repredicted"] = {**stamp, "workloads": done, "not_repredicted": not_done}
    out = args.out or args.directory
    out.mkdir(parents=True, exist_ok=True)
    write(results, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
