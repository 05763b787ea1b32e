"""Predicted against realized gains over the accuracy corpus (issue 25).

For each workload of benchmarks/corpus/manifest.py (or ``--manifest FILE``, a Python file
defining ``WORKLOADS``):

1. the prediction: ``gpudoctor diagnose`` once on the baseline (no ``--try``), read for
   the top finding (its predicted gain and method) and, per remedy, the finding the remedy
   targets (the first one the report names, the other named ones kept as cross-checks; a
   remedy whose findings the report does not name is predicted 1.0x, "none named");
2. the realization, without gpudoctor: the baseline and each remedy variant run plainly
   under benchmarks/corpus/steprate.py, alternated in pairs (baseline first in even pairs,
   last in odd ones). Per run, the steady throughput: steps after the first 20% over their
   time (between two waits for the GPU, steprate's STEPRATE_SYNC_SHARE, where the run used
   CUDA), times the remedy's samples per step (a bigger batch). Realized gain = the median
   over pairs of remedy / baseline of the same pair.

Writes OUT/corpus.json and OUT/corpus.md (workload, remedy, predicted (method), realized,
error, and the issue's goal checks) after every workload, so that a run cut short still
leaves its results, and keeps each diagnose's Session and profiler window trace, scrubbed,
in OUT/sessions-STAMP.tar and OUT/traces-STAMP.tar (keep.py), which repredict.py reads to
predict again, without the GPU, when the model changes. ``--resume`` keeps OUT/corpus.json's
workloads that are done or failed and goes on with the others (partial, not run, not yet
in it): a partial one keeps its complete pairs and its diagnose (when its session was kept)
and runs only the missing pairs. ``--budget-s`` bounds the whole run: no run starts that its
workload's bound would carry past it, and no diagnose that a pair could not follow.
``--gpus 0,1,...`` runs that many workloads at once, one per GPU, each confined to its own
``--cores-per-gpu`` cores (taskset), so that an 8-GPU host measures like eight one-GPU
machines.

    python benchmarks/corpus/fetch.py --mirrors MIRRORS        # once: public scripts and data
    python benchmarks/corpus/run.py --out DIR --budget-s 560 [--pairs 2] [--only a,b] [--resume]
    python benchmarks/corpus/run.py --list                    # the manifest as a table
    python benchmarks/corpus/repredict.py DIR                 # predict again from the kept sessions
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import runpy
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import manifest
from keep import Bundles, replacements, scrub_record
from manifest import Remedy, Workload
from score import device, goal, judge, listing, markdown, prediction, realized, top_finding, x_gain

STEPRATE = manifest.CORPUS / "steprate.py"
HANDFIX = manifest.CORPUS / "handfix.py"
SCHEMA = "gpudoctor.corpus/1"
STARTUP_S = 30.0  # allowance for interpreter, imports and set-up beyond a workload's own bound
SLOW_START_S = 180.0  # a run is stopped only this much later still (torch.compile's first step, cuDNN tuning)
MIN_STEADY = 5
DIAGNOSE_SETUP_S = 45.0  # diagnose's --duration counts the set-up too: the workload's bound plus this
# What a run is expected to take beyond the workload's bound, for planning what fits in the budget
# (the limits above are for stopping a run): the H200 plain runs at a 12 s bound took 6-39 s, median
# 17 s, and a diagnose 10-69 s, median 18 s. Planning on the limits left about 170 s of each call
# unused; a run the deadline cuts leaves its workload partial, and --resume takes it up again.
PLAN_SETUP_S = 10.0
PLAN_DIAGNOSE_S = 20.0


@dataclass(frozen=True)
class Slot:
    """Where a workload runs: one GPU (or none) and the cores its processes may use."""

    gpu: str | None
    cores: str | None  # a taskset list ("0-15"), or None for every core


def command(workload: Workload, remedy: Remedy | None, public: Path, tmp: Path, stamps: Path | None,
            slot: Slot) -> list[str]:
    """The argv of one run: the baseline (remedy None) or a variant, under steprate when STAMPS is given."""
    args = workload.args if remedy is None or remedy.args is None else remedy.args
    argv = [manifest.expand(workload.script, public=public, tmp=tmp),
            *(manifest.expand(a, public=public, tmp=tmp) for a in args)]
    if remedy is not None and remedy.handfix:
        argv = [str(HANDFIX), ",".join(remedy.handfix), "--", *argv]
    if stamps is not None:
        argv = [str(STEPRATE), str(stamps), *argv]
    if workload.torchrun:
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                str(workload.torchrun), *argv]
    else:
        argv = [sys.executable, *argv]
    if slot.cores and shutil.which("taskset"):
        argv = ["taskset", "-c", slot.cores, *argv]
    return argv


def environment(workload: Workload, remedy: Remedy | None, slot: Slot, public: Path, tmp: Path) -> dict[str, str]:
    added = {**workload.env, **(remedy.env if remedy is not None else {})}
    env = {**os.environ, **{k: manifest.expand(v, public=public, tmp=tmp) for k, v in added.items()}}
    env.pop("GPUDOCTOR_SESSION_DIR", None)
    if slot.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.gpu
    if workload.forward_steps:
        env["STEPRATE_FORWARD"] = "1"
    return env


_RUNNING: set[subprocess.Popen[str]] = set()  # the runs under way (each in its own session)
_RUNNING_LOCK = threading.RLock()  # re-entrant: the SIGTERM handler may interrupt its holder
_STOPPING: list[bool] = []  # set by the SIGTERM handler: no run starts after it


def launch(argv: list[str], **popen: Any) -> subprocess.Popen[str]:
    """A run in a session of its own (its loader workers with it), known to the SIGTERM handler."""
    with _RUNNING_LOCK:
        if _STOPPING:
            raise SystemExit("corpus: stopping")
        proc: subprocess.Popen[str] = subprocess.Popen(argv, text=True, start_new_session=True, **popen)
        _RUNNING.add(proc)
    return proc


def communicate(proc: subprocess.Popen[str], timeout: float) -> tuple[str, bool]:
    """stderr of PROC (from launch(); its tail), and whether it had to be stopped."""
    try:
        _, stderr = proc.communicate(timeout=max(1.0, timeout))
        _end_group(proc)  # loader workers left behind by a bounded run must not share the next run's cores
        return stderr or "", False
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGTERM)  # gpudoctor stops its workload on SIGTERM and still reports
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            _end_group(proc)
            _, stderr = proc.communicate()
        return stderr or "", True
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)


def stop_runs_on_sigterm() -> None:
    """A harness stopped from outside (`timeout`) stops the runs it started, each in a session of its
    own that the signal does not reach, and waits for them: one left running (a diagnose still writing
    its report, a workload holding the GPU) would share the machine with whatever is measured next."""
    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the stopping short
        with _RUNNING_LOCK:
            _STOPPING.append(True)
            running = list(_RUNNING)
        for proc in running:  # all told at once, then waited for
            _signal_group(proc, signal.SIGTERM)
        deadline = time.time() + 30
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                _end_group(proc)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _signal_group(proc: subprocess.Popen[str], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _end_group(proc: subprocess.Popen[str]) -> None:
    _signal_group(proc, signal.SIGKILL)


def _prepare(workload: Workload, public: Path, tmp: Path) -> Path:
    cwd = Path(manifest.expand(workload.cwd, public=public, tmp=tmp))
    cwd.mkdir(parents=True, exist_ok=True)
    for pattern in workload.scratch:
        for path in cwd.glob(pattern):
            if path.is_file():
                path.unlink()
    return cwd


def steady_rate(stamps: list[float], warmup_share: float, synced: list[list[float]] | None = None,
                events: list[list[float]] | None = None) -> tuple[float | None, int]:
    """Steps per second after the first WARMUP_SHARE of the steps, and how many steps that is.
    Where steprate waited for the GPU after the warm-up and at the end (SYNCED, two [steps, time]),
    the steps between the two waits over the time between them: what the device finished, not
    what the host queued. Where it did not (the script ended before its bound), the GPU time
    between its last two events (EVENTS, [steps, ms] at the 1st, 2nd, 4th ... step: the later
    half of the steps up to the last event, past any warm-up share up to a quarter)."""
    if synced and len(synced) >= 2:
        (first_n, first_t), (last_n, last_t) = synced[0], synced[-1]
        steady = int(last_n - first_n)
        if steady >= MIN_STEADY and last_t > first_t:
            return steady / (last_t - first_t), steady
    elif events and (between := _between_events(stamps, warmup_share, events)) is not None:
        return between
    first = max(1, int(len(stamps) * warmup_share))
    steady = len(stamps) - first
    if steady < MIN_STEADY or stamps[-1] <= stamps[first - 1]:
        return None, max(steady, 0)
    return steady / (stamps[-1] - stamps[first - 1]), steady


def _between_events(stamps: list[float], warmup_share: float,
                    events: list[list[float]]) -> tuple[float, int] | None:
    if len(events) < 2:
        return None
    (first_n, first_ms), (last_n, last_ms) = events[-2], events[-1]
    steady = int(last_n - first_n)
    if steady < MIN_STEADY or first_n < warmup_share * len(stamps) or last_ms <= first_ms:
        return None
    return steady / ((last_ms - first_ms) / 1e3), steady


def clock(stamps: list[float], warmup_share: float, synced: list[list[float]],
          events: list[list[float]]) -> str:
    """Which clock steady_rate read: "gpu" (the two waits), "gpu-events" or "host"."""
    if len(synced) >= 2:
        return "gpu"
    return "gpu-events" if _between_events(stamps, warmup_share, events) is not None else "host"


def plain_run(workload: Workload, remedy: Remedy | None, public: Path, slot: Slot, timeout: float,
              warmup_share: float) -> dict[str, Any]:
    """One run without gpudoctor: its steady throughput (samples per baseline step, per second) or why none."""
    with tempfile.TemporaryDirectory(prefix="gd-corpus-") as scratch:
        tmp = Path(scratch)
        stamps = tmp / "steps.json"
        env = environment(workload, remedy, slot, public, tmp)
        env["STEPRATE_MAX_STEPS"] = str(workload.max_steps)
        env["STEPRATE_MAX_S"] = str(workload.max_seconds)
        env["STEPRATE_SYNC_SHARE"] = str(warmup_share)  # the steady steps measured on the GPU's clock
        start = time.time()
        proc = launch(command(workload, remedy, public, tmp, stamps, slot), env=env,
                      cwd=_prepare(workload, public, tmp), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stderr, stopped = communicate(proc, timeout)
        result: dict[str, Any] = {"variant": remedy.name if remedy else "baseline", "exit": proc.returncode,
                                  "wall_s": round(time.time() - start, 2)}
        files = sorted(tmp.glob("steps.json*"))
        if stopped:
            result["error"] = f"stopped after {timeout:.0f}s"
        elif proc.returncode != 0 or not files:
            result["error"] = f"exit {proc.returncode}: {stderr.strip()[-400:]}"
        if "error" in result:
            return result
        data = json.loads(files[0].read_text())
        synced, events = data.get("synced") or [], data.get("events") or []
        rate, steady = steady_rate(data["t"], warmup_share, synced, events)
        result.update(steps=len(data["t"]), steady_steps=steady, step_source=data["source"],
                      clock=clock(data["t"], warmup_share, synced, events))
        if rate is None:
            result["error"] = f"too few steady steps ({steady} of {len(data['t'])})"
            return result
        scale = remedy.step_scale if remedy is not None else 1.0
        result.update(steps_per_s=round(rate, 4), throughput=round(rate * scale, 4))
        return result


def diagnose(workload: Workload, public: Path, slot: Slot, timeout: float, bundles: Bundles) -> dict[str, Any]:
    """`gpudoctor diagnose` on the baseline: its JSON report or why there is none; its Session and
    window trace appended to BUNDLES (`kept` says where, or why not)."""
    with tempfile.TemporaryDirectory(prefix="gd-corpus-") as scratch:
        tmp = Path(scratch)
        argv = [sys.executable, "-m", "gpudoctor", "diagnose", "--quiet", "--out", f"{tmp}/report/",
                "--steps", str(workload.max_steps), "--duration", str(workload.max_seconds + DIAGNOSE_SETUP_S), "--",
                *command(workload, None, public, tmp, None, Slot(slot.gpu, None))]
        if slot.cores and shutil.which("taskset"):
            argv = ["taskset", "-c", slot.cores, *argv]
        env = environment(workload, None, slot, public, tmp)
        # `-m gpudoctor` from this checkout where it is not installed (after whatever PYTHONPATH holds)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(manifest.ROOT)) if p)
        start = time.time()
        proc = launch(argv, env=env, cwd=_prepare(workload, public, tmp), stdout=subprocess.DEVNULL,
                      stderr=subprocess.PIPE)
        stderr, stopped = communicate(proc, timeout)
        reports = [p for p in (tmp / "report").glob("*.json") if not p.name.endswith(".session.json")]
        if not reports:
            return {"error": f"no report (exit {proc.returncode}{', stopped' if stopped else ''}): "
                             f"{stderr.strip()[-400:]}", "wall_s": round(time.time() - start, 1),
                    "kept": {"why": "diagnose wrote no report"}}
        wall_s = round(time.time() - start, 1)
        try:
            kept = bundles.keep(workload.name, tmp / "report", replacements(tmp, public))
        except (OSError, ValueError, tarfile.TarError) as exc:  # the prediction stands; it cannot be re-made
            kept = {"why": f"not kept: {type(exc).__name__}: {exc}"}
        return {"report": json.loads(reports[0].read_text()), "wall_s": wall_s, "stopped": stopped, "kept": kept}


def carried_over(earlier: dict[str, Any] | None, workload: Workload) -> tuple[dict[str, Any] | None, list[
        dict[str, dict[str, Any]]]]:
    """What a partial or unrun entry of an earlier call still holds for WORKLOAD: its diagnose, when it
    kept a session and a prediction for every remedy (else None: diagnose again), and its complete pairs
    (every variant run in it). A pair's ratio compares two runs made back to back, so pairs of several
    calls are compared alike; a remedy set changed since leaves nothing to carry over."""
    if not earlier or [r["remedy"] for r in earlier.get("remedies") or []] not in (
            [], [r.name for r in workload.remedies]):
        return None, []
    variants = {"baseline", *(r.name for r in workload.remedies)}
    by_pair: dict[int, dict[str, dict[str, Any]]] = {}
    for run in earlier.get("runs") or []:
        by_pair.setdefault(int(run.get("pair", -1)), {})[run["variant"]] = run
    pairs = [by_pair[i] for i in sorted(by_pair) if set(by_pair[i]) == variants]
    rows = earlier.get("remedies") or []
    diagnosed = (earlier if (earlier.get("kept") or {}).get("session") and earlier.get("diagnose")
                 and len(rows) == len(workload.remedies) and all(r.get("method") for r in rows) else None)
    return diagnosed, pairs


def run_pair(workload: Workload, order: list[Remedy | None], i: int, args: argparse.Namespace, slot: Slot,
             deadline: float) -> dict[str, dict[str, Any]] | None:
    """Pair I: each variant run plainly, in ORDER; None when the deadline cut one of its runs (cut,
    not failed: the pair is dropped, and runs again on --resume)."""
    pair: dict[str, dict[str, Any]] = {}
    for remedy in order:
        result = plain_run(workload, remedy, args.public, slot,
                           min(workload.max_seconds + STARTUP_S + SLOW_START_S, deadline - time.time()),
                           args.warmup_share)
        if result.get("error") and time.time() >= deadline - 1:
            return None
        result["pair"] = i
        pair[result["variant"]] = result
    return pair


def run_workload(workload: Workload, args: argparse.Namespace, slot: Slot, deadline: float,
                 bundles: Bundles, earlier: dict[str, Any] | None = None) -> dict[str, Any]:
    """Diagnose WORKLOAD's baseline once and run the pairs; EARLIER (a partial or unrun entry of an
    earlier call) lends its diagnose and complete pairs (carried_over), and only what is missing runs."""
    entry: dict[str, Any] = {
        "workload": workload.name, "public": workload.source is not None,
        "source": ({"repo": workload.source.repo, "commit": workload.source.commit, "path": workload.source.paths[0]}
                   if workload.source else None),
        "causes": list(workload.causes), "slot": {"gpu": slot.gpu, "cores": slot.cores}, "stamp": bundles.stamp,
        "status": "done",
        "notes": [], "diagnose": None, "kept": None, "runs": [], "remedies": []}
    started = time.time()
    planned = workload.max_seconds + PLAN_SETUP_S

    report: dict[str, Any] | None = None
    diagnosed, pairs = carried_over(earlier, workload)
    variants: list[Remedy | None] = [None, *workload.remedies]
    for pair in pairs:
        entry["runs"].extend(pair.values())
    if pairs:
        entry["notes"].append(f"{len(pairs)} pair(s) carried over from {earlier.get('stamp') if earlier else None}")
    if diagnosed is not None:
        entry.update(diagnose=diagnosed["diagnose"], kept=diagnosed["kept"])
        entry["notes"].append(f"diagnose carried over from {diagnosed.get('stamp')}")
    elif not args.no_diagnose:
        # diagnose only where a pair can follow it in this call: a diagnose alone measures nothing
        if len(pairs) < args.pairs and time.time() + PLAN_DIAGNOSE_S + (len(variants) + 1) * planned > deadline:
            entry["status"] = "not run: time budget"
            return entry
        report = _diagnose_into(entry, workload, args, slot, deadline, bundles)
    for i in range(len(pairs), args.pairs):
        order = variants if i % 2 == 0 else list(reversed(variants))
        if time.time() + len(order) * planned > deadline:
            entry["notes"].append(f"time budget: {i} of {args.pairs} pairs run")
            entry["status"] = "partial: time budget" if i else "not run: time budget"
            break
        pair = run_pair(workload, order, i, args, slot, deadline)
        if pair is None:
            entry["notes"].append(f"time budget: a run of pair {i} was cut at the deadline; {i} of {args.pairs} "
                                  "pairs run")
            entry["status"] = "partial: time budget" if i else "not run: time budget"
            break
        entry["runs"].extend(pair.values())
        pairs.append(pair)
    for remedy in workload.remedies:
        per_pair = []
        for pair in pairs:
            base, other = pair.get("baseline") or {}, pair.get(remedy.name) or {}
            ratio = (round(other["throughput"] / base["throughput"], 4)
                     if base.get("throughput") and other.get("throughput") else None)
            per_pair.append({"baseline": base.get("throughput"), "remedy": other.get("throughput"), "ratio": ratio,
                             "baseline_error": base.get("error"), "remedy_error": other.get("error")})
        row: dict[str, Any] = {"workload": workload.name, "remedy": remedy.name, "targets": list(remedy.targets),
                               "step_scale": remedy.step_scale, "pairs": per_pair, **realized(per_pair)}
        if report is not None:
            row.update(prediction(report, remedy))
        elif diagnosed is not None:
            before = next(r for r in diagnosed["remedies"] if r["remedy"] == remedy.name)
            row.update({key: before[key] for key in ("named", "predicted", "method", "finding", "cross_checks",
                                                      "diagnosed") if key in before})
        else:
            row.update({"named": None, "predicted": None, "method": None, "finding": None, "cross_checks": []})
        judge(row)
        entry["remedies"].append(row)
    baselines = [r for r in entry["runs"] if r["variant"] == "baseline"]
    if baselines and all(r.get("error") for r in baselines) and entry["status"] == "done":
        entry["status"] = "failed"  # the remedies may have run: their rows say so
        entry["notes"].append(f"baseline: {baselines[0]['error'][:300]}")
    entry["seconds"] = round(time.time() - started, 1)
    return entry


def _diagnose_into(entry: dict[str, Any], workload: Workload, args: argparse.Namespace, slot: Slot, deadline: float,
                   bundles: Bundles) -> dict[str, Any] | None:
    """Diagnose the baseline once; ENTRY's diagnose and kept say how it went. The report, or None."""
    run_bound = workload.max_seconds + STARTUP_S
    result = diagnose(workload, args.public, slot,
                      min(DIAGNOSE_SETUP_S + run_bound + SLOW_START_S, deadline - time.time()), bundles)
    report: dict[str, Any] | None = result.pop("report", None)
    entry["kept"] = result.pop("kept", None)
    entry["diagnose"] = {**result, "top": top_finding(report) if report else None,
                         "verdict": ((report or {}).get("summary") or {}).get("verdict"),
                         "environment": (report or {}).get("environment")}
    return report


def rediagnose(entry: dict[str, Any], workload: Workload, args: argparse.Namespace, slot: Slot, deadline: float,
               bundles: Bundles) -> None:
    """A kept entry without a kept session (measured before sessions were kept): diagnose its baseline
    again, keep the session, and read each remedy's prediction from the new report; the realized gains
    stay as measured. An entry the budget leaves no room for, or whose diagnose gives no report, is
    left as it was."""
    if time.time() + workload.max_seconds + PLAN_SETUP_S + PLAN_DIAGNOSE_S > deadline:
        return
    before = {key: entry.get(key) for key in ("diagnose", "kept")}
    report = _diagnose_into(entry, workload, args, slot, deadline, bundles)
    if report is None:
        entry.update(before)
        entry["notes"].append("rediagnose gave no report: the earlier prediction stays")
        return
    remedies = {r.name: r for r in workload.remedies}
    for row in entry["remedies"]:
        remedy = remedies.get(row["remedy"])
        if remedy is None:
            continue
        row.setdefault("diagnosed", {key: row.get(key) for key in ("predicted", "method", "finding")})
        row.update(prediction(report, remedy))
        row["targets"] = list(remedy.targets)
        judge(row)
    entry["stamp"] = bundles.stamp
    entry["notes"].append(f"diagnosed again ({bundles.stamp}): the realized gains are the earlier run's")


def to_rediagnose(kept: list[dict[str, Any]], args: argparse.Namespace, known: set[str],
                  only: set[str] | None) -> list[dict[str, Any]]:
    """The kept entries --rediagnose diagnoses again: those without a kept session, and those it names."""
    if args.rediagnose is None or args.no_diagnose:
        return []
    named = set(args.rediagnose.split(",")) if args.rediagnose else set()
    return [e for e in kept if e["workload"] in known and (only is None or e["workload"] in only)
            and (needs_rediagnose(e) or e["workload"] in named)]


def needs_rediagnose(entry: dict[str, Any]) -> bool:
    """A kept entry whose prediction cannot be made again offline: no session of it was kept."""
    return not (entry.get("kept") or {}).get("session")


def write(results: dict[str, Any], out: Path) -> None:
    results["goal"] = goal(results["workloads"])
    device_name, torch_version = device(results["workloads"])
    results["meta"]["device"] = device_name
    results["meta"]["torch"] = torch_version or results["meta"].get("torch")
    for name, text in (("corpus.json", json.dumps(results, indent=1, default=str)), ("corpus.md", markdown(results))):
        partial = out / f".{name}.tmp"
        partial.write_text(scrub_record(text))
        partial.replace(out / name)


def slots(args: argparse.Namespace) -> list[Slot]:
    if not args.gpus:
        return [Slot(None, None)]
    gpus = args.gpus.split(",")
    if not args.cores_per_gpu:
        return [Slot(g, None) for g in gpus]
    return [Slot(g, f"{i * args.cores_per_gpu}-{(i + 1) * args.cores_per_gpu - 1}") for i, g in enumerate(gpus)]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="directory for corpus.json, corpus.md and the bundles of kept "
                                                  "sessions and traces (sessions-*.tar, traces-*.tar)")
    parser.add_argument("--public", type=Path, default=manifest.PUBLIC, help="materialised public sources "
                                                                             "(fetch.py's --out; default: %(default)s)")
    parser.add_argument("--manifest", type=Path, help="a Python file defining WORKLOADS (default: manifest.py)")
    parser.add_argument("--only", help="comma-separated workload names")
    parser.add_argument("--skip", help="comma-separated workload names to leave out")
    parser.add_argument("--pairs", type=int, default=2, help="alternated baseline/remedy pairs (default 2)")
    parser.add_argument("--budget-s", type=float, default=560.0, help="seconds for everything (default 560)")
    parser.add_argument("--resume", action="store_true",
                        help="keep OUT/corpus.json's workloads that are done or failed, run the others "
                             "(partial, not run, or not in it) again")
    parser.add_argument("--bundle-limit-mb", type=float, default=15.0,
                        help="start another traces bundle past this size (default 15)")
    parser.add_argument("--no-diagnose", action="store_true", help="realized gains only")
    parser.add_argument("--gpus", help="comma-separated GPU indices: one workload at a time on each")
    parser.add_argument("--cores-per-gpu", type=int, default=0, help="cores each GPU's workload may use (taskset)")
    parser.add_argument("--max-seconds", type=float, default=0.0,
                        help="cap every workload's bound on a run (seconds of run; default: the manifest's)")
    parser.add_argument("--list", action="store_true", help="print the manifest as a markdown table and exit")
    parser.add_argument("--rediagnose", nargs="?", const="", default=None, metavar="NAMES",
                        help="with --resume: diagnose again, first, the kept workloads that have no kept session "
                             "(their realized gains stay; predicting them again offline needs the session), and "
                             "the comma-separated kept workloads NAMES whatever they kept (a change in how "
                             "diagnose measures its run)")
    parser.add_argument("--remeasure", help="with --resume: comma-separated kept workloads whose pairs are run again, "
                                            "first (a change in how runs are measured); a kept diagnose stays")
    parser.add_argument("--warmup-share", type=float, default=0.2, help="share of each run's first steps left out")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    start = time.time()
    deadline = start + args.budget_s
    workloads: tuple[Workload, ...] = (tuple(runpy.run_path(str(args.manifest))["WORKLOADS"])
                                       if args.manifest else manifest.WORKLOADS)
    if args.list:
        print(listing(workloads))
        return 0
    if args.out is None:
        print("corpus: --out is required", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    skip = set(args.skip.split(",")) if args.skip else set()
    remeasure = set(args.remeasure.split(",")) if args.remeasure else set()
    named_again = set(args.rediagnose.split(",")) if args.rediagnose else set()
    unknown = ((only or set()) | skip | remeasure | named_again) - {w.name for w in workloads}
    if unknown:
        print(f"corpus: unknown workloads: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    previous = args.out / "corpus.json"
    earlier = json.loads(previous.read_text()) if args.resume and previous.exists() else None
    kept = [e for e in resumable(earlier) if e["workload"] not in remeasure]
    done = {e["workload"] for e in kept}
    unfinished = {e["workload"]: (dict(e, runs=[]) if e["workload"] in remeasure else e)
                  for e in (earlier or {}).get("workloads") or [] if e["workload"] not in done}
    queue = [w for w in workloads if (only is None or w.name in only) and w.name not in skip and w.name not in done]
    queue.sort(key=lambda w: w.name not in remeasure)  # the measured rows first, the manifest's order otherwise
    if args.max_seconds:
        queue = [dataclasses.replace(w, max_seconds=min(w.max_seconds, args.max_seconds)) for w in queue]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    bundles = Bundles(args.out, stamp, int(args.bundle_limit_mb * 2**20))
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "meta": {"date": datetime.date.today().isoformat(), "pairs": args.pairs, "budget_s": args.budget_s,
                 "warmup_share": args.warmup_share, "max_seconds": args.max_seconds or None,
                 "python": platform.python_version(), "cpu_count": os.cpu_count(),
                 "slots": [s.__dict__ for s in slots(args)], "gpudoctor": gpudoctor_version(),
                 "commit": checkout_commit(), "torch": None, "stamp": stamp,
                 "resumed": len(kept) if args.resume else None, "earlier": earlier_runs(earlier)},
        "workloads": kept,
    }
    lock = threading.Lock()
    by_name = {w.name: (dataclasses.replace(w, max_seconds=min(w.max_seconds, args.max_seconds))
                        if args.max_seconds else w) for w in workloads}
    again = to_rediagnose(kept, args, set(by_name), only)

    def worker(slot: Slot) -> None:
        while True:
            with lock:
                entry = again.pop(0) if again else None
            if entry is None:
                break
            rediagnose(entry, by_name[entry["workload"]], args, slot, deadline, bundles)
            with lock:
                write(results, args.out)
            print(f"corpus: {entry['workload']} diagnosed again", file=sys.stderr, flush=True)
        while True:
            with lock:
                if not queue:
                    return
                workload = queue.pop(0)
            entry = run_workload(workload, args, slot, deadline, bundles, unfinished.get(workload.name))
            with lock:
                results["workloads"].append(entry)
                write(results, args.out)
            summary = "; ".join(f"{r['remedy']}: predicted {x_gain(r.get('predicted'))} "
                                f"realized {x_gain(r.get('realized'))}" for r in entry["remedies"])
            print(f"corpus: {workload.name} [{entry['status']}] {summary}", file=sys.stderr, flush=True)

    threads = [threading.Thread(target=worker, args=(slot,)) for slot in slots(args)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results["workloads"] += left_out(unfinished, results["workloads"])
    results["meta"]["seconds"] = round(time.time() - start, 1)
    write(results, args.out)
    print(markdown(results))
    return 0


def resumable(previous: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The entries of a previous corpus.json that --resume keeps: done or failed (a failure is a
    result); a partial or unrun one is measured again, from what it holds (carried_over)."""
    if previous is None:
        return []
    return [e for e in previous.get("workloads") or [] if e.get("status") in ("done", "failed")]


def left_out(unfinished: dict[str, dict[str, Any]], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The earlier entries this run did not take up (--only, --skip), as they were: a run of a
    few workloads keeps the table whole, its unmeasured rows and their status included."""
    seen = {e["workload"] for e in entries}
    return [e for name, e in unfinished.items() if name not in seen]


def earlier_runs(previous: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The meta of every run a resumed corpus.json carries results of, the oldest first."""
    if previous is None:
        return []
    meta = dict(previous.get("meta") or {})
    return [*(meta.pop("earlier", None) or []), meta]


def gpudoctor_version() -> str | None:
    try:
        from gpudoctor import __version__

        return str(__version__)
    except ImportError:
        return None


def checkout_commit() -> str | None:
    """The commit of this checkout (with '+changes' when the tree differs from it), where git can tell."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=manifest.ROOT, capture_output=True, text=True,
                              timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=manifest.ROOT,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip()[:12] + ("+changes" if dirty.returncode == 0 and dirty.stdout.strip() else "")


if __name__ == "__main__":
    stop_runs_on_sigterm()
    sys.exit(main())
