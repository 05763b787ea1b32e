"""The accuracy corpus's runner (benchmarks/corpus/run.py): predictions read, realized gains from paired runs."""

from __future__ import annotations

import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import load_corpus_module

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "benchmarks" / "corpus"




run = load_corpus_module("run")
score = load_corpus_module("score")
manifest = sys.modules["manifest"]

REPORT: dict[str, Any] = {
    "findings": [
        {"id": "GD102", "severity": "critical", "title": "stall", "estimated_gain": 6.0,
         "prediction": {"method": "replay"}},
        {"id": "GD101", "severity": "warning", "title": "workers", "estimated_gain": 4.0,
         "prediction": {"method": "rule"}},
        {"id": "GD201", "severity": "info", "title": "idle", "estimated_gain": None, "consequence_of": "GD102"},
    ],
}


def test_the_prediction_is_the_first_named_target_with_the_others_as_cross_checks() -> None:
    remedy = manifest.Remedy("12 workers", ("GD101", "GD102", "GD201"), ("-j", "12"))
    got = score.prediction(REPORT, remedy)
    assert (got["named"], got["predicted"], got["method"]) == (True, 6.0, "replay")
    assert [c["id"] for c in got["cross_checks"]] == ["GD101", "GD201"]
    consequence_first = {"findings": [REPORT["findings"][2], {**REPORT["findings"][1], "estimated_gain": 3.0}]}
    assert score.prediction(consequence_first, remedy)["finding"]["id"] == "GD101"
    unnamed = score.prediction(REPORT, manifest.Remedy("compile", ("GD301",), ("--compile",)))
    assert (unnamed["named"], unnamed["predicted"], unnamed["method"]) == (False, 1.0, "none named")
    assert score.top_finding(REPORT)["id"] == "GD102"


def test_a_batch_remedy_reads_the_finding_curve_at_its_step_scale() -> None:
    """syn_small_batch: batch 2048 is 64x the samples per step; GD202's curve says what that buys,
    not its gain at the multiple it recommends, nor GD201's bound."""
    curve = [{"multiple": m, "gain": float(m)} for m in (2, 4, 8, 16, 32)] + [{"multiple": 64, "gain": 60.0}]
    report = {"findings": [
        {"id": "GD201", "severity": "critical", "estimated_gain": 10.0, "consequence_of": None,
         "prediction": {"method": "bound"}},
        {"id": "GD202", "severity": "warning", "estimated_gain": 16.0, "consequence_of": None,
         "prediction": {"method": "model", "batch_multiple": 16, "batch_curve": curve}},
    ]}
    remedy = manifest.Remedy("batch 2048", ("GD201", "GD202"), ("--batch", "2048"), step_scale=64.0)
    got = score.prediction(report, remedy)
    assert (got["finding"]["id"], got["predicted"]) == ("GD202", 60.0)
    assert got["method"] == "model, at 64x the batch"
    assert score.gain_at(curve, 48) == pytest.approx(32 * (60 / 32) ** (math.log(1.5) / math.log(2)), rel=1e-3)
    # a remedy that keeps the batch reads the finding's own number
    same = manifest.Remedy("workers", ("GD202",), ("-j", "8"))
    assert score.prediction(report, same)["predicted"] == 16.0


def test_a_worker_remedy_reads_the_finding_curve_at_its_count() -> None:
    """syn_loader_two_workers: GD101 recommends 15 workers (7.57x); a remedy setting 6 is scored against
    the same model's gain with 6 (3.13x, realized 2.99x), not against the 15's; at a count past the
    curve, its last point (the model's cap: no more); without a count, the finding's own number."""
    curve = [{"workers": w, "gain": g} for w, g in ((3, 1.5), (4, 2.0), (6, 3.13), (15, 7.57))]
    report = {"findings": [
        {"id": "GD101", "severity": "critical", "estimated_gain": 7.57, "consequence_of": None,
         "prediction": {"method": "replay", "worker_curve": curve}},
        {"id": "GD102", "severity": "critical", "estimated_gain": 7.57, "consequence_of": None,
         "prediction": {"method": "replay"}},
    ]}
    six = score.prediction(report, manifest.Remedy("6 workers", ("GD101", "GD102"), ("--workers", "6"), workers=6))
    assert (six["finding"]["id"], six["predicted"], six["method"]) == ("GD101", 3.13, "replay, with 6 workers")
    assert score.gain_with(curve, 5) == pytest.approx(2.565)
    assert score.gain_with(curve, 16) == 7.57
    assert score.gain_with(curve, 2) is None
    assert score.prediction(report, manifest.Remedy("workers", ("GD101",), ("-j", "6")))["predicted"] == 7.57


def test_a_worker_remedy_reads_the_curve_of_a_finding_that_advises_no_workers() -> None:
    """examples_ddp_tutorial_torchrun: GD102 says workers would not help (a batch costs 0.1 ms to make, 0.4 ms
    to receive) and its own number is the instant-data one (1.13x); its curve says what 2 workers would do
    (0.59x, realized 0.69x). The remedy is scored on the curve, and on the finding that has one."""
    curve = [{"workers": w, "gain": g} for w, g in ((1, 0.694), (2, 0.592), (3, 0.516))]
    report = {"findings": [
        {"id": "GD101", "severity": "info", "estimated_gain": 1.02, "consequence_of": None,
         "prediction": {"method": "replay"}},
        {"id": "GD102", "severity": "warning", "estimated_gain": 1.13, "consequence_of": "GD302",
         "prediction": {"method": "replay", "worker_curve": curve}},
    ]}
    got = score.prediction(report, manifest.Remedy("2 workers", ("GD101", "GD102"), handfix=("workers=2",),
                                                   workers=2))
    assert (got["finding"]["id"], got["predicted"], got["method"]) == ("GD102", 0.59, "replay, with 2 workers")
    # a remedy that sets no count reads the report's order as before
    assert score.prediction(report, manifest.Remedy("workers", ("GD101", "GD102"), ("-j", "2")))["predicted"] == 1.02


def test_plain_compile_reads_its_own_number_from_the_launch_findings_evidence() -> None:
    """syn_launch_bound: GD301's gain (3.18x, critical) is for CUDA graphs; plain torch.compile is scored
    against the finding's compiled_gain, and judged as a finding of that gain alone would be (a warning at
    1.30x: realizing 1.08x is then a miss of 20%, not a critical finding under 1.1x). A report without the
    number gives the row none."""
    gd301 = {"id": "GD301", "severity": "critical", "estimated_gain": 3.18, "consequence_of": None,
             "prediction": {"method": "replay"},
             "evidence": {"compiled_gain": {"value": 1.3, "unit": "x",
                                            "label": "predicted with plain torch.compile(model), no CUDA graphs "
                                                     "(replay)"}}}
    remedy = manifest._compiled(("--compile", "default"))
    got = score.prediction({"findings": [gd301]}, remedy)
    assert (got["predicted"], got["finding"]["severity"]) == (1.3, "warning")
    assert got["method"].startswith("compiled_gain, predicted with plain torch.compile(model)")
    row = {**got, "realized": 1.08}
    score.judge(row)
    assert row["error"] == pytest.approx(1.3 / 1.08 - 1, abs=1e-4) and not row["critical_under_1_1"]
    graphs = score.prediction({"findings": [gd301]}, manifest.Remedy("CUDA graphs", ("GD301",), ("--compile", "ro")))
    assert (graphs["predicted"], graphs["finding"]["severity"]) == (3.18, "critical")
    bare = score.prediction({"findings": [{**gd301, "evidence": {}}]}, remedy)
    assert bare["named"] and bare["predicted"] is None


def test_a_numpy_gain_is_judged_into_plain_json_values() -> None:
    """A gain read from a curve may be a numpy scalar: the row's flags stay real bools, which the corpus
    file writes as true and false (not the text "False", which the goal would count as a miss)."""
    import numpy as np

    row = {"predicted": np.float64(1.94), "realized": np.float64(1.8096), "finding": {"severity": "critical"},
           "named": True}
    score.judge(row)
    assert type(row["within_30"]) is bool and type(row["off_by_2x"]) is bool
    assert json.loads(json.dumps(row, default=str))["off_by_2x"] is False
    assert score.goal([{"workload": "w", "public": True, "remedies": [{**row, "workload": "w", "remedy": "r"}]}],
                      min_workloads=1)["off_by_2x"] == []


def test_realized_is_the_median_of_the_pairs_ratios() -> None:
    pairs = [{"ratio": 2.0}, {"ratio": 3.0}, {"ratio": 10.0}]
    assert score.realized(pairs)["realized"] == 3.0
    failed = score.realized([{"ratio": None, "baseline_error": "exit 1: OOM", "remedy_error": None}])
    assert failed["realized"] is None and "baseline failed" in failed["note"]


def test_the_goal_checks() -> None:
    rows = [
        {"workload": "a", "remedy": "r", "predicted": 2.0, "realized": 1.8, "named": True,
         "finding": {"severity": "critical"}},
        {"workload": "b", "remedy": "r", "predicted": 6.0, "realized": 1.05, "named": True,
         "finding": {"severity": "critical"}},
        {"workload": "c", "remedy": "r", "predicted": 1.0, "realized": 3.0, "named": False, "finding": None},
    ]
    for row in rows:
        score.judge(row)
    assert rows[0]["within_30"] and not rows[0]["off_by_2x"] and not rows[0]["critical_under_1_1"]
    assert rows[1]["off_by_2x"] and rows[1]["critical_under_1_1"]
    assert rows[2]["unnamed_over_1_5"] and rows[2]["off_by_2x"]
    goal = score.goal([{"remedies": rows}])
    assert (goal["compared"], goal["within_30"], goal["met"]) == (3, 1, False)
    assert goal["critical_under_1_1"] == ["b: r"] and goal["unnamed_over_1_5"] == ["c: r"]
    assert score.goal([{"remedies": rows[:1], "public": True}], min_workloads=1)["met"]
    # too few workloads measured, or fewer than half of them public scripts: not met, whatever the errors
    assert not score.goal([{"remedies": rows[:1], "public": True}])["met"]
    assert not score.goal([{"remedies": rows[:1], "public": False}], min_workloads=1)["met"]
    no_report = {"workload": "d", "remedy": "r", "predicted": None, "realized": 3.0, "named": None, "finding": None}
    score.judge(no_report)
    assert not no_report["unnamed_over_1_5"] and no_report["error"] is None


def test_steady_rate_leaves_the_warmup_out() -> None:
    stamps = [0.0, 5.0] + [5.0 + 0.1 * i for i in range(1, 21)]  # a slow first step, then 10 steps/s
    rate, steady = run.steady_rate(stamps, 0.2)
    assert steady == 18 and rate == pytest.approx(10.0)
    assert run.steady_rate([0.0, 1.0, 2.0], 0.2)[0] is None


def test_steady_rate_between_the_waits_for_the_gpu_is_the_devices_rate() -> None:
    """A loop that never waits for the GPU: the host queues 100 steps/s while the device finishes 40/s; the
    host stamps say 100, the two waits (after 20 steps, when the bound ended the run at 100) say 40."""
    stamps = [0.01 * i for i in range(1, 101)]
    synced = [[20, 20 / 40.0], [100, 100 / 40.0]]  # the device had finished step n at n / 40 s
    assert run.steady_rate(stamps, 0.2)[0] == pytest.approx(100.0)
    rate, steady = run.steady_rate(stamps, 0.2, synced)
    assert (steady, rate) == (80, pytest.approx(40.0))
    # one wait only (the script ended on its own before its bound): the host stamps, as before
    assert run.steady_rate(stamps, 0.2, synced[:1])[0] == pytest.approx(100.0)


def test_a_script_that_ends_before_its_bound_is_measured_between_its_last_two_gpu_events() -> None:
    """40 steps queued by the host at 1000/s while the device does 10/s: no wait for the GPU came (the script
    ended before the bound), so the events at steps 1, 2, 4 ... 32 time the device: steps 17-32, 1.6 s."""
    stamps = [0.001 * i for i in range(1, 41)]
    events = [[n, n * 100.0] for n in (1, 2, 4, 8, 16, 32)]  # the device finished step n at n x 100 ms
    assert run.steady_rate(stamps, 0.2)[0] == pytest.approx(1000.0)
    rate, steady = run.steady_rate(stamps, 0.2, [], events)
    assert (steady, rate) == (16, pytest.approx(10.0))
    assert run.clock(stamps, 0.2, [], events) == "gpu-events"
    # the two waits, where they came, are the clock; events that leave too few steps, or fall in the
    # warm-up, are not: the host stamps stand
    assert run.clock(stamps, 0.2, [[8, 0.8], [40, 4.0]], events) == "gpu"
    assert run.steady_rate(stamps, 0.2, [], events[:3])[0] == pytest.approx(1000.0)
    assert run.clock(stamps, 0.2, [], events[:3]) == "host"
    longer = [0.001 * i for i in range(1, 401)]  # 400 steps: steps 16-32 fall in the warm-up (the first 80)
    assert run.clock(longer, 0.2, [], events) == "host"
    assert run.steady_rate(longer, 0.2, [], events)[0] == pytest.approx(1000.0)


def test_a_variant_runs_under_steprate_handfix_and_torchrun(tmp_path: Path) -> None:
    workload = manifest.Workload("w", "{public}/o+n/train.py", ("-b", "8"), ("GD301",),
                                 (manifest.Remedy("tf32", ("GD304",), handfix=("tf32", "workers=2")),), torchrun=1)
    argv = run.command(workload, workload.remedies[0], tmp_path, tmp_path, tmp_path / "s.json", run.Slot("1", None))
    assert argv[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    assert argv[6:] == [str(run.STEPRATE), str(tmp_path / "s.json"), str(run.HANDFIX), "tf32,workers=2", "--",
                        f"{tmp_path}/o+n/train.py", "-b", "8"]
    env = run.environment(workload, workload.remedies[0], run.Slot("1", None), tmp_path, tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_workloads_environment_has_its_placeholders_filled(tmp_path: Path) -> None:
    """accelerate's cv_example finds timm's weights in an offline hub cache under the generated data."""
    workload = manifest.Workload("w", "train.py", (), ("GD101",), (manifest.Remedy("bf16", ("GD304",),
                                 env={"EXTRA": "{tmp}/x"}),), env={"HF_HOME": "{data}/hf", "HF_HUB_OFFLINE": "1"})
    env = run.environment(workload, workload.remedies[0], run.Slot(None, None), tmp_path / "public", tmp_path)
    assert env["HF_HOME"] == str(tmp_path / "public" / "_data" / "hf") and env["HF_HUB_OFFLINE"] == "1"
    assert env["EXTRA"] == f"{tmp_path}/x"


def test_steprate_keeps_one_hook_on_the_root_once_it_is_learnt() -> None:
    """Six forwards of a root holding 2 x (Linear, ReLU) on one thread: six steps stamped, and after
    the third (LEARN) no global hook is left, so the 4 inner modules run on torch's fast path (a
    global hook costs every module call, a cost the GPU-bound big batch hides and the small one pays)."""
    import torch
    from torch.nn.modules import module

    steprate = load_corpus_module("steprate")
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()) for _ in range(2)])
    stamps: list[tuple[float, bool, str]] = []
    calls = [0, 0]
    before = (len(module._global_forward_pre_hooks), len(module._global_forward_hooks))
    handles = steprate.forward_hooks(module, lambda kind: stamps.append((time.perf_counter(), False, kind)),
                                     stamps, calls)
    try:
        with torch.no_grad():
            for _ in range(6):
                model(torch.zeros(1, 4))
        assert [k for _, _, k in stamps] == ["forward"] * 6
        assert (len(module._global_forward_pre_hooks), len(module._global_forward_hooks)) == before
        assert len(handles) == 1 and len(model._forward_pre_hooks) == 1
        assert not any(m._forward_pre_hooks for m in model.modules() if m is not model)
        # 7 modules a forward while learning (2 forwards), the third's root alone, then the root's own 3
        assert calls[0] == 2 * 7 + 1 + 3
    finally:
        for handle in handles:
            handle.remove()
    assert not model._forward_pre_hooks


COMPILED = """
import json, torch
from torch._dynamo.utils import counters
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()) for _ in range(4)])
compiled = torch.compile(model, backend="eager")
with torch.no_grad():
    for _ in range(12):
        compiled(torch.randn(2, 8))
print(json.dumps({"graph_breaks": sum(counters["graph_break"].values())}))
"""


@pytest.mark.integration
def test_steprate_counts_forwards_of_a_compiled_module_without_breaking_its_graph(tmp_path: Path) -> None:
    # the global forward hooks are traced inside a compiled module: there they must do nothing
    # (Dynamo broke the graph at every module and recompiled per module until its limit)
    (tmp_path / "infer.py").write_text(COMPILED)
    proc = subprocess.run([sys.executable, str(run.STEPRATE), str(tmp_path / "s.json"), str(tmp_path / "infer.py")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "STEPRATE_FORWARD": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"graph_breaks": 0}
    stamps = json.loads((tmp_path / "s.json").read_text())
    assert stamps["source"] == "forward" and len(stamps["t"]) == 12


@pytest.mark.integration
def test_the_runner_end_to_end_on_two_cpu_workloads(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(CORPUS / "run.py"), "--out", str(out), "--manifest",
                           str(Path(__file__).with_name("cpu_corpus.py")), "--pairs", "2", "--budget-s", "400"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((out / "corpus.json").read_text())
    assert results["schema"] == "gpudoctor.corpus/1"
    assert [e["workload"] for e in sorted(results["workloads"], key=lambda e: e["workload"])] == \
        ["cpu_loader", "cpu_small_batch"]
    for entry in results["workloads"]:
        assert entry["status"] == "done", entry["notes"]
        assert entry["diagnose"] is not None and "wall_s" in entry["diagnose"]
        _assert_kept(out, entry, str(tmp_path))
        runs = entry["runs"]
        # two pairs, alternated: baseline first, then last
        assert [r["variant"] for r in runs] == ["baseline", entry["remedies"][0]["remedy"],
                                                entry["remedies"][0]["remedy"], "baseline"]
        assert all(r.get("throughput") for r in runs), runs
        row = entry["remedies"][0]
        assert len(row["pairs"]) == 2
        for i, pair in enumerate(row["pairs"]):
            base = next(r for r in runs if r["pair"] == i and r["variant"] == "baseline")
            other = next(r for r in runs if r["pair"] == i and r["variant"] == row["remedy"])
            assert pair["ratio"] == pytest.approx(other["throughput"] / base["throughput"], rel=1e-3, abs=1e-4)
            assert other["throughput"] == pytest.approx(other["steps_per_s"] * row["step_scale"], rel=1e-3)
        assert row["realized"] == pytest.approx(statistics.median(p["ratio"] for p in row["pairs"]), rel=1e-3)
        assert row["predicted"] is not None and row["method"]
        assert set(row) >= {"error", "within_30", "off_by_2x", "critical_under_1_1", "unnamed_over_1_5"}
    assert set(results["goal"]) >= {"compared", "within_30", "off_by_2x", "critical_under_1_1", "unnamed_over_1_5",
                                    "met"}
    table = (out / "corpus.md").read_text()
    assert "| workload | remedy | finding | predicted (method) | realized | error |" in table
    assert "| cpu_loader | 1 worker |" in table and "| cpu_small_batch | batch 32 |" in table
    assert "Goal (issue 25)" in table and "within 30% of the realized gain" in table
    assert not (out / "reports").exists()
    assert sorted(p.name.split("-")[0] for p in out.iterdir()) == ["corpus.json", "corpus.md", "sessions", "traces"]
    assert str(ROOT) not in (out / "corpus.json").read_text()

    # the same model predicts the same from the kept sessions, without running anything
    again = tmp_path / "again"
    proc = subprocess.run([sys.executable, str(CORPUS / "repredict.py"), str(out), "--out", str(again),
                           "--manifest", str(Path(__file__).with_name("cpu_corpus.py"))],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    repredicted = json.loads((again / "corpus.json").read_text())
    assert sorted(repredicted["meta"]["repredicted"]["workloads"]) == ["cpu_loader", "cpu_small_batch"]
    for before, after in zip(results["workloads"], repredicted["workloads"]):
        assert after["prediction"]["replay"] == ("not replayed: a CPU-only window" if before["kept"]["trace"] else
                                                 "replay as recorded: " + before["kept"]["why_no_trace"])
        assert after["diagnose"]["top"] == before["diagnose"]["top"]
        for row, row_again in zip(before["remedies"], after["remedies"]):
            assert {k: row_again[k] for k in ("predicted", "method", "finding", "named", "cross_checks", "error",
                                              "realized")} == \
                {k: row[k] for k in ("predicted", "method", "finding", "named", "cross_checks", "error", "realized")}

    # --resume keeps a done entry as it is; a partial one (cut short in its second pair) keeps its complete pair
    # and its diagnose and runs the second pair again; one without a kept session is diagnosed again
    partial = results["workloads"][1]
    partial["status"] = "partial: time budget"
    partial["runs"] = [r for r in partial["runs"] if r["pair"] == 0] + [partial["runs"][-1]]
    undiagnosed = dict(results["workloads"][0], status="not run: time budget", kept={"why": "x"}, runs=[])
    earlier_kept = dict(results["workloads"][0])
    (out / "corpus.json").write_text(json.dumps(results))
    proc = subprocess.run([sys.executable, str(CORPUS / "run.py"), "--out", str(out), "--manifest",
                           str(Path(__file__).with_name("cpu_corpus.py")), "--pairs", "2", "--budget-s", "300",
                           "--resume"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = json.loads((out / "corpus.json").read_text())
    assert resumed["workloads"][0] == earlier_kept
    rerun = resumed["workloads"][1]
    assert (rerun["workload"], rerun["status"]) == (partial["workload"], "done")
    assert [(r["variant"], r["pair"]) for r in rerun["runs"]][:2] == [(r["variant"], 0) for r in partial["runs"][:2]]
    assert [r["pair"] for r in rerun["runs"]] == [0, 0, 1, 1] and rerun["kept"] == partial["kept"]
    assert rerun["diagnose"] == partial["diagnose"] and len(rerun["remedies"][0]["pairs"]) == 2
    assert rerun["stamp"] != partial["stamp"] == resumed["meta"]["earlier"][-1]["stamp"]
    assert resumed["meta"]["resumed"] == 1
    assert len(list(out.glob("sessions-*.tar"))) == 1  # nothing diagnosed: the first run's bundle only

    results["workloads"] = [undiagnosed]
    (out / "corpus.json").write_text(json.dumps(results))
    proc = subprocess.run([sys.executable, str(CORPUS / "run.py"), "--out", str(out), "--manifest",
                           str(Path(__file__).with_name("cpu_corpus.py")), "--pairs", "1", "--budget-s", "300",
                           "--resume", "--only", undiagnosed["workload"]], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (again_entry,) = json.loads((out / "corpus.json").read_text())["workloads"]
    assert again_entry["status"] == "done" and len(again_entry["runs"]) == 2
    _assert_kept(out, again_entry, str(tmp_path))
    assert len(list(out.glob("sessions-*.tar"))) == 2  # one per run that diagnosed


def _assert_kept(out: Path, entry: dict[str, Any], machine_path: str) -> None:
    """ENTRY's session and window trace are in the bundles it names, scrubbed of the run's paths."""
    from gpudoctor.session import Session

    kept = entry["kept"]
    assert kept["sessions"] == f"sessions-{entry['stamp']}.tar"
    members = [(kept["sessions"], kept["session"])]
    if kept["traces"] is None:  # a short CPU run on a loaded machine may end before its window closes
        assert kept["why_no_trace"] and kept["trace"] is None
    else:
        assert kept["traces"].startswith(f"traces-{entry['stamp']}")
        members.append((kept["traces"], kept["trace"]))
    for bundle, member in members:
        with tarfile.open(out / bundle) as tar:
            handle = tar.extractfile(member)
            assert handle is not None
            text = gzip.decompress(handle.read()).decode()
        assert machine_path not in text and str(ROOT) not in text and sys.executable not in text
        assert "gd-corpus-" not in text  # the run's scratch directory became {tmp}
        if member.endswith("session.json.gz"):
            session = Session.from_dict(json.loads(text))
            assert session.cwd == "{tmp}"
            assert (session.profile is not None and session.profile.trace_file is not None) == bool(kept["traces"])
        else:
            assert json.loads(text)["traceEvents"]


@pytest.mark.integration
def test_the_runner_keeps_to_its_budget_and_still_writes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(CORPUS / "run.py"), "--out", str(out), "--manifest",
                           str(Path(__file__).with_name("cpu_corpus.py")), "--budget-s", "1"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((out / "corpus.json").read_text())
    assert {e["status"] for e in results["workloads"]} == {"not run: time budget"}
    assert "not run: time budget" in (out / "corpus.md").read_text()


@pytest.mark.integration
def test_a_resumed_run_of_some_workloads_keeps_the_others_rows(tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = [sys.executable, str(CORPUS / "run.py"), "--out", str(out), "--manifest",
            str(Path(__file__).with_name("cpu_corpus.py")), "--budget-s", "1"]
    subprocess.run(base, capture_output=True, text=True, timeout=120, cwd=ROOT, check=True)
    names = [e["workload"] for e in json.loads((out / "corpus.json").read_text())["workloads"]]
    assert len(names) >= 2
    proc = subprocess.run([*base, "--resume", "--only", names[-1]], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads((out / "corpus.json").read_text())["workloads"]
    assert sorted(e["workload"] for e in again) == sorted(names)  # the rows --only left out are still there
    assert all(e["status"] == "not run: time budget" for e in again)
    assert all(name in (out / "corpus.md").read_text() for name in names)


def test_rediagnose_reads_new_predictions_and_keeps_the_realized_gains(tmp_path: Path, monkeypatch) -> None:
    """An entry measured before sessions were kept is diagnosed again: its prediction comes from the
    new report, its realized gain and pairs stay, and the first prediction is kept beside it."""
    remedy = manifest.Remedy("12 workers", ("GD101", "GD102"), ("-j", "12"))
    workload = manifest.Workload("w", "script.py", (), ("GD101",), (remedy,))
    row = {"workload": "w", "remedy": "12 workers", "targets": ["GD101"], "step_scale": 1.0,
           "pairs": [{"ratio": 8.0}], "realized": 8.0, "ratios": [8.0], "named": True, "predicted": 2.0,
           "method": "rule", "finding": {"id": "GD101"}, "cross_checks": []}
    score.judge(row)
    entry = {"workload": "w", "status": "done", "notes": [], "kept": {"why": "before sessions were kept"},
             "diagnose": None, "runs": [{"variant": "baseline"}], "remedies": [row]}
    assert run.needs_rediagnose(entry) and row["off_by_2x"]
    calls = []

    def fake_diagnose(workload, public, slot, timeout, bundles):
        calls.append(workload.name)
        return {"report": REPORT, "wall_s": 1.0, "stopped": False,
                "kept": {"sessions": "sessions-S.tar", "session": "w/session.json.gz"}}

    monkeypatch.setattr(run, "diagnose", fake_diagnose)
    args = run.parse(["--out", str(tmp_path), "--resume", "--rediagnose"])
    bundles = run.Bundles(tmp_path, "S", 2**20)
    run.rediagnose(entry, workload, args, run.Slot(None, None), time.time() + 600, bundles)
    assert calls == ["w"] and not run.needs_rediagnose(entry)
    (after,) = entry["remedies"]
    assert (after["predicted"], after["method"], after["finding"]["id"]) == (6.0, "replay", "GD102")
    assert (after["realized"], after["pairs"]) == (8.0, [{"ratio": 8.0}])  # as measured
    assert after["diagnosed"] == {"predicted": 2.0, "method": "rule", "finding": {"id": "GD101"}}
    assert after["error"] == pytest.approx(6.0 / 8.0 - 1) and after["within_30"] and not after["off_by_2x"]
    assert entry["diagnose"]["top"]["id"] == "GD102"

    # no room left in the budget, or no report: the entry stays as it was
    untouched = json.loads(json.dumps({**entry, "kept": None}))
    run.rediagnose(untouched, workload, args, run.Slot(None, None), time.time(), bundles)
    assert calls == ["w"] and untouched["remedies"][0]["predicted"] == 6.0
    monkeypatch.setattr(run, "diagnose", lambda *a: {"error": "no report", "wall_s": 1.0, "kept": {"why": "x"}})
    run.rediagnose(untouched, workload, args, run.Slot(None, None), time.time() + 600, bundles)
    assert untouched["kept"] is None and "earlier prediction stays" in untouched["notes"][-1]


def test_rediagnose_takes_the_entries_without_a_session_and_those_it_names(tmp_path: Path) -> None:
    """Bare --rediagnose: only the entries with no kept session; --rediagnose a,b: those too, kept session or not
    (a change in how diagnose measures); --only and --no-diagnose still bound it; no flag: none."""
    kept = [{"workload": "bare", "kept": None},
            {"workload": "kept", "kept": {"session": "kept/session.json.gz"}},
            {"workload": "other", "kept": {"session": "other/session.json.gz"}}]
    known = {"bare", "kept", "other"}

    def names(*argv: str, only: set[str] | None = None) -> list[str]:
        args = run.parse(["--out", str(tmp_path), "--resume", *argv])
        return [e["workload"] for e in run.to_rediagnose(kept, args, known, only)]

    assert names() == []
    assert names("--rediagnose") == ["bare"]
    assert names("--rediagnose", "kept") == ["bare", "kept"]
    assert names("--rediagnose", "kept", only={"kept"}) == ["kept"]
    assert names("--rediagnose", "kept", "--no-diagnose") == []


def test_a_trace_over_the_transfer_limit_is_not_kept_and_repredict_says_so(tmp_path: Path) -> None:
    """A window trace too big to come back from the GPU machine on its own is left out with the reason; a traces
    bundle named in corpus.json that did not come back leaves the recorded replay standing."""
    keep = load_corpus_module("keep")
    repredict = load_corpus_module("repredict")

    report = tmp_path / "report"
    report.mkdir()
    (report / "r.session.json").write_text(json.dumps({"schema": "x"}))
    noise = os.urandom(64 * 1024).hex()  # ~64 KiB once compressed
    (report / "r.trace.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": [], "x": noise}).encode()))
    out = tmp_path / "out"
    out.mkdir()
    kept = keep.Bundles(out, "S", limit_bytes=32 * 1024).keep("big", report, [])
    assert kept["traces"] is None and kept["trace"] is None
    assert "over what one transfer brings back" in kept["why_no_trace"]
    assert not list(out.glob("traces-*"))  # no bundle was started for it
    assert keep.read_member(out, kept["sessions"], kept["session"]) == b'{"schema": "x"}'

    # a real kept Session (an H200 corpus run) whose traces bundle stayed on the GPU machine
    results = ROOT / "benchmarks" / "corpus" / "results" / "h200"
    entry = next(e for e in json.loads((results / "corpus.json").read_text())["workloads"]
                 if e["workload"] == "syn_pageable_copies")
    missing = dict(entry["kept"], traces="traces-never-came-back.tar")
    report_again, how = repredict.predict_again(results, missing)
    assert how == "replay as recorded: traces-never-came-back.tar did not come back from the GPU machine"
    assert any(f["id"] == "GD105" for f in report_again["findings"])


def test_a_partial_workload_goes_on_from_its_complete_pairs_and_its_kept_diagnose(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """--resume on a workload cut short: its complete pairs and its diagnose (a session was kept) are carried
    over, a half-run pair is not, and only the missing pair runs; without a kept session it is diagnosed again;
    a budget that leaves no room for a pair after the diagnose runs nothing at all."""
    remedy = manifest.Remedy("12 workers", ("GD101", "GD102"), ("-j", "12"))
    workload = manifest.Workload("w", "script.py", (), ("GD101",), (remedy,), max_seconds=10.0)
    runs = [{"variant": "baseline", "pair": 0, "throughput": 10.0}, {"variant": "12 workers", "pair": 0,
                                                                      "throughput": 40.0},
            {"variant": "12 workers", "pair": 1, "throughput": 41.0}]  # pair 1 lost its baseline: cut short
    row = {"workload": "w", "remedy": "12 workers", "named": True, "predicted": 3.0, "method": "rule",
           "finding": {"id": "GD101"}, "cross_checks": []}
    earlier = {"workload": "w", "status": "partial: time budget", "stamp": "A", "runs": runs, "remedies": [row],
               "diagnose": {"wall_s": 20.0, "top": {"id": "GD101"}},
               "kept": {"sessions": "sessions-A.tar", "session": "w/session.json.gz"}}
    ran, diagnosed = [], []

    def fake_run(workload, remedy, public, slot, timeout, warmup_share):
        ran.append(remedy.name if remedy else "baseline")
        return {"variant": remedy.name if remedy else "baseline", "throughput": 50.0 if remedy else 10.0}

    def fake_diagnose(workload, public, slot, timeout, bundles):
        diagnosed.append(workload.name)
        return {"report": REPORT, "wall_s": 1.0, "kept": {"sessions": "sessions-B.tar", "session": "w/session.json.gz"}}

    monkeypatch.setattr(run, "plain_run", fake_run)
    monkeypatch.setattr(run, "diagnose", fake_diagnose)
    args = run.parse(["--out", str(tmp_path), "--resume", "--pairs", "2"])
    bundles = run.Bundles(tmp_path, "B", 2**20)

    entry = run.run_workload(workload, args, run.Slot(None, None), time.time() + 600, bundles, earlier)
    assert diagnosed == [] and ran == ["12 workers", "baseline"]  # pair 1 only, in its alternated order
    assert entry["status"] == "done" and entry["kept"] == earlier["kept"]
    (after,) = entry["remedies"]
    assert [p["ratio"] for p in after["pairs"]] == [4.0, 5.0] and after["realized"] == pytest.approx(4.5)
    assert (after["predicted"], after["method"]) == (3.0, "rule")
    assert after["error"] == pytest.approx(3.0 / 4.5 - 1, abs=1e-4)

    # no kept session: diagnosed again, the complete pair still carried over
    ran.clear()
    entry = run.run_workload(workload, args, run.Slot(None, None), time.time() + 600, bundles,
                             {**earlier, "kept": {"why": "diagnose wrote no session"}})
    assert diagnosed == ["w"] and ran == ["12 workers", "baseline"]
    assert entry["remedies"][0]["method"] == "replay" and len(entry["remedies"][0]["pairs"]) == 2

    # a remedy set changed since: nothing carried over
    assert run.carried_over({**earlier, "remedies": [{**row, "remedy": "8 workers"}]}, workload) == (None, [])

    # room for the diagnose but not for a pair after it: nothing runs, not even the diagnose
    ran.clear()
    room = run.PLAN_DIAGNOSE_S + 10.0 + run.PLAN_SETUP_S + 1.0
    entry = run.run_workload(workload, args, run.Slot(None, None), time.time() + room, bundles, None)
    assert entry["status"] == "not run: time budget" and diagnosed == ["w"] and ran == []


def rate_script(size: int, first: str, measured: str, last: str = "") -> str:
    """A Linear(SIZE, SIZE) loop on the GPU: FIRST steps, then the device's rate printed, measured by MEASURED
    (20 forwards between two waits), then LAST."""
    return f"""
import time, torch
model = torch.nn.Linear({size}, {size}, device="cuda")
twin = torch.nn.Linear({size}, {size}, device="cuda")  # the same work; steprate stamps model's forwards only
x = torch.randn({size}, {size}, device="cuda")
with torch.no_grad():
    for _ in range({first}):
        model(x)
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(20):
        {measured}(x)
    torch.cuda.synchronize()
    print(20 / (time.perf_counter() - began))  # the device's rate, waited for
    {last}
"""


# steps queued and waited for, the rate measured on them, then a loop that never waits: the bound ends it
QUEUED = rate_script(4096, "20", "model", "for _ in range(10_000): model(x)")
# 40 steps queued and never waited for until the script ends, long before its bound; the rate on the twin
SHORT = rate_script(8192, "40", "twin")


def stamped_on_the_gpu(tmp_path: Path, script: str, max_steps: int) -> tuple[float, dict]:
    """SCRIPT run under steprate (forward steps) on the GPU: the device rate it printed, and the stamps."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    (tmp_path / "loop.py").write_text(script)
    env = {**os.environ, "STEPRATE_FORWARD": "1", "STEPRATE_MAX_STEPS": str(max_steps), "STEPRATE_SYNC_SHARE": "0.2"}
    proc = subprocess.run([sys.executable, str(run.STEPRATE), str(tmp_path / "s.json"), str(tmp_path / "loop.py")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return float(proc.stdout.strip().splitlines()[-1]), json.loads((tmp_path / "s.json").read_text())


@pytest.mark.gpu
@pytest.mark.integration
def test_a_script_that_ends_before_its_bound_is_measured_on_the_devices_clock(tmp_path) -> None:
    device_rate, data = stamped_on_the_gpu(tmp_path, SHORT, 300)
    assert data["synced"] == [] and [n for n, _ in data["events"]][-1] == 32
    assert run.clock(data["t"], 0.2, data["synced"], data["events"]) == "gpu-events"
    rate, _ = run.steady_rate(data["t"], 0.2, data["synced"], data["events"])
    assert rate == pytest.approx(device_rate, rel=0.15)
    assert run.steady_rate(data["t"], 0.2)[0] > 2 * rate  # what the host stamps alone would have said


@pytest.mark.gpu
@pytest.mark.integration
def test_steprate_waits_for_the_gpu_so_a_loop_that_never_waits_is_measured_at_the_devices_rate(tmp_path) -> None:
    device_rate, data = stamped_on_the_gpu(tmp_path, QUEUED, 1500)
    assert len(data["synced"]) == 2 and data["synced"][-1][0] == len(data["t"]) == 1500
    host_rate, _ = run.steady_rate(data["t"], 0.2)
    rate, steady = run.steady_rate(data["t"], 0.2, data["synced"])
    assert steady == 1500 - data["synced"][0][0]
    assert rate == pytest.approx(device_rate, rel=0.15)  # the queue filling does not count
    assert host_rate > 1.3 * rate, (host_rate, rate)  # what the host stamps alone would have said


def test_remeasure_runs_a_kept_workloads_pairs_again_first_and_keeps_its_diagnose(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """--resume --remeasure NAME: a done workload's pairs are run again (how runs are measured changed), before
    the workloads not yet run, its kept diagnose and prediction carried over; other done workloads stay."""
    corpus = runpy_manifest()
    loader, small = corpus
    entries = []
    for workload in corpus:
        remedy = workload.remedies[0]
        entries.append({"workload": workload.name, "status": "done", "stamp": "A", "public": False,
                        "runs": [{"variant": "baseline", "pair": 0, "throughput": 10.0},
                                 {"variant": remedy.name, "pair": 0, "throughput": 90.0}],
                        "remedies": [{"workload": workload.name, "remedy": remedy.name, "named": True,
                                      "predicted": 3.0, "method": "replay", "finding": {"id": "GD101"},
                                      "cross_checks": [], "pairs": [{"ratio": 9.0}], "realized": 9.0}],
                        "diagnose": {"wall_s": 1.0}, "kept": {"sessions": "sessions-A.tar", "session": "x"}})
    out = tmp_path / "out"
    out.mkdir()
    (out / "corpus.json").write_text(json.dumps({"meta": {"stamp": "A"}, "workloads": entries}))
    ran, diagnosed = [], []

    def fake_run(workload, remedy, public, slot, timeout, warmup_share):
        ran.append(workload.name)
        return {"variant": remedy.name if remedy else "baseline", "throughput": 40.0 if remedy else 10.0}

    monkeypatch.setattr(run, "plain_run", fake_run)
    monkeypatch.setattr(run, "diagnose", lambda workload, *a: diagnosed.append(workload.name))
    monkeypatch.setattr(run, "checkout_commit", lambda: None)  # no git process in a unit test
    assert run.main(["--out", str(out), "--manifest", str(Path(__file__).with_name("cpu_corpus.py")), "--resume",
                     "--pairs", "1", "--remeasure", loader.name]) == 0
    assert ran == [loader.name, loader.name] and diagnosed == []
    results = {e["workload"]: e for e in json.loads((out / "corpus.json").read_text())["workloads"]}
    again, same = results[loader.name], results[small.name]
    assert again["remedies"][0]["realized"] == 4.0 and again["remedies"][0]["predicted"] == 3.0
    assert again["kept"] == entries[0]["kept"] and same["remedies"][0]["realized"] == 9.0
    assert run.main(["--out", str(out), "--resume", "--remeasure", "no_such_workload"]) == 2


def runpy_manifest() -> tuple[Any, ...]:
    import runpy

    return tuple(runpy.run_path(str(Path(__file__).with_name("cpu_corpus.py")))["WORKLOADS"])


HARNESS = """
import subprocess, sys, threading
sys.path.insert(0, sys.argv[1])
import run
run.stop_runs_on_sigterm()
said = threading.Lock()  # print() writes the number and its newline apart: two threads interleave them

def one(i):  # as run.py's workers do: each thread starts a run and waits for it
    child = run.launch([sys.executable, "-c", sys.argv[2], sys.argv[3] + str(i)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    with said:
        print(child.pid, flush=True)
    run.communicate(child, 600)

threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""

CHILD = """
import os, signal, sys, time
def stop(signum, frame):
    time.sleep(0.5)  # as gpudoctor does: stop the workload, write the report
    open(sys.argv[1], "w").write("reported")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[1] + ".ready", "w").close()
time.sleep(600)
"""


@pytest.mark.integration
def test_a_harness_stopped_from_outside_stops_its_runs_and_waits_for_them(tmp_path: Path) -> None:
    """`timeout` signals the harness; its runs, in sessions of their own, would run on beside what the call
    measures next (a diagnose still writing its report held 5.8 GB of the H200 into the next measurement).
    Two runs from two threads, as run.py's workers start them."""
    marker = tmp_path / "reported"
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(run.STEPRATE.parent), CHILD, str(marker)],
                               stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None
    children = [int(harness.stdout.readline()) for _ in range(2)]
    deadline = time.time() + 60
    while not all(Path(f"{marker}{i}.ready").exists() for i in range(2)) and time.time() < deadline:
        time.sleep(0.05)  # both runs have their handler
    harness.terminate()
    assert harness.wait(timeout=60) == 128 + 15
    # each run was told to stop and finished its report before the harness left
    assert [Path(f"{marker}{i}").read_text() for i in range(2)] == ["reported", "reported"]
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


FORKING = """
import torch
from torch.utils.data import DataLoader
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(list(range(16)), batch_size=4, num_workers=2)  # two new workers each epoch
for epoch in range(3):
    for batch in loader:
        model(batch.float().unsqueeze(1).expand(-1, 4)).sum().backward()
        opt.step()
"""


@pytest.mark.integration
def test_steprate_times_each_fork_and_says_what_the_process_held_at_its_end(tmp_path: Path) -> None:
    # the evidence that tells a diagnosed run slowed after a window apart: forks that grew slower, a
    # thread left running, CUPTI still loaded (none of them on a CPU run of torch without profiling)
    (tmp_path / "loop.py").write_text(FORKING)
    proc = subprocess.run([sys.executable, str(run.STEPRATE), str(tmp_path / "s.json"), str(tmp_path / "loop.py")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    stamps = json.loads((tmp_path / "s.json").read_text())
    assert len(stamps["t"]) == 12
    assert len(stamps["forks"]) == 6  # 2 workers x 3 epochs
    began = [t for t, _ in stamps["forks"]]
    assert began == sorted(began) and all(ms > 0 for _, ms in stamps["forks"])
    assert stamps["threads"] >= 1 and stamps["cupti"] is False
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import overhead
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    rates = overhead.rates(stamps)
    spans = [ms for _, ms in stamps["forks"][1:]]
    assert rates["forks"] == 6 and rates["fork_ms"] == [round(statistics.median(spans), 2), round(max(spans), 2)]
    assert rates["cupti"] is False and rates["threads"] == stamps["threads"]
