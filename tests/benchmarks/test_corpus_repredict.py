"""The corpus's kept sessions (benchmarks/corpus/keep.py), --resume, and predicting again without the GPU
(benchmarks/corpus/repredict.py), on Sessions and window traces recorded on the H200."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import load_corpus_module

from gpudoctor.session import Session
from gpudoctor.verdict.judge import judge

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"




keep = load_corpus_module("keep")
repredict = load_corpus_module("repredict")
run = sys.modules["run"]  # as repredict imports it: its write() is the one that writes
score = sys.modules["score"]
manifest = sys.modules["manifest"]

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
NAME = "loader_starved_gpu"  # GD101 + GD102 critical, predicted by the replay
REMEDY = manifest.Remedy("15 workers", ("GD101", "GD102"), ("--workers", "15"))


@pytest.fixture(autouse=True)
def _no_git(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The checkout's commit is asked of git, a process: these in-process tests name one."""
    monkeypatch.setattr(repredict, "checkout_commit", lambda: "0123456789ab")
    yield


def _diagnose_dir(tmp_path: Path, name: str = NAME) -> Path:
    """A report directory as diagnose leaves it, from a recorded Session and its window's trace,
    with the machine paths a run on this machine would have put in them."""
    report = tmp_path / "report"
    report.mkdir()
    text = (H200 / f"{name}.session.json").read_text()
    data = json.loads(text)
    data["cwd"] = f"{tmp_path}/gd-corpus-x1/work"
    data["command"] = ["/opt/venv/bin/python3", f"{CORPUS}/synthetic.py", *data["command"][2:]]
    (report / f"{name}.session.json").write_text(json.dumps(data))
    shutil.copy(H200 / "windows" / f"{name}.trace.json.gz", report / f"{name}.trace.json.gz")
    return report


def _corpus(tmp_path: Path, realized: float = 6.85) -> Path:
    """A corpus output with one entry whose session and trace were kept, predicted as diagnose would."""
    out = tmp_path / "out"
    out.mkdir()
    bundles = keep.Bundles(out, "20261205T000000Z")
    kept = bundles.keep(NAME, _diagnose_dir(tmp_path), keep.replacements(tmp_path / "gd-corpus-x1", tmp_path))
    report = judge(Session.load(H200 / f"{NAME}.session.json")).report
    row: dict[str, Any] = {"workload": NAME, "remedy": REMEDY.name, "targets": list(REMEDY.targets), "step_scale": 1.0,
                           "pairs": [{"ratio": realized}], **score.realized([{"ratio": realized}]),
                           **score.prediction(report, REMEDY)}
    score.judge(row)
    entry = {"workload": NAME, "status": "done", "notes": [], "kept": kept, "runs": [], "remedies": [row],
             "diagnose": {"top": score.top_finding(report), "environment": report.get("environment")}}
    results = {"schema": run.SCHEMA, "meta": {"date": "2026-12-05", "pairs": 1, "gpudoctor": "0.1.0", "torch": None},
               "workloads": [entry]}
    run.write(results, out)
    return out


def test_a_kept_session_and_trace_are_scrubbed_bundled_and_read_back(tmp_path: Path) -> None:
    out = _corpus(tmp_path)
    entry = json.loads((out / "corpus.json").read_text())["workloads"][0]
    kept = entry["kept"]
    assert (kept["sessions"], kept["session"]) == ("sessions-20261205T000000Z.tar", f"{NAME}/session.json.gz")
    assert (kept["traces"], kept["trace"]) == ("traces-20261205T000000Z.tar", f"{NAME}/window.trace.json.gz")
    with tarfile.open(out / kept["sessions"]) as tar:
        assert tar.getnames() == [kept["session"]]
    session_text = repredict.read_member(out, kept["sessions"], kept["session"]).decode()
    assert str(tmp_path) not in session_text and "/opt/venv" not in session_text
    session = Session.from_dict(json.loads(session_text))
    assert session.cwd == "{tmp}/work"
    assert session.command[:2] == ["python3", "{corpus}/synthetic.py"]
    trace = repredict.read_member(out, kept["traces"], kept["trace"])
    assert json.loads(trace)["traceEvents"] == json.loads(
        gzip.decompress((H200 / "windows" / f"{NAME}.trace.json.gz").read_bytes()))["traceEvents"]
    assert kept["trace_bytes"] < (H200 / "windows" / f"{NAME}.trace.json.gz").stat().st_size * 1.1


def test_a_traces_bundle_past_its_limit_goes_on_in_another_file(tmp_path: Path) -> None:
    bundles = keep.Bundles(tmp_path, "S", limit_bytes=500_000)  # the trace is ~320 kB: one per file
    names = []
    for workload in ("a", "b", "c"):
        (tmp_path / workload).mkdir()
        report = _diagnose_dir(tmp_path / workload)
        names.append(bundles.keep(workload, report, [])["traces"])
    assert names == ["traces-S.tar", "traces-S-2.tar", "traces-S-3.tar"]
    assert all((tmp_path / n).stat().st_size < 500_000 for n in names)
    with tarfile.open(tmp_path / "sessions-S.tar") as tar:
        assert tar.getnames() == ["a/session.json.gz", "b/session.json.gz", "c/session.json.gz"]


def test_resume_keeps_done_and_failed_entries_and_runs_the_others_again() -> None:
    previous = {"meta": {"date": "2026-12-04", "earlier": [{"date": "2026-12-03"}]}, "workloads": [
        {"workload": "a", "status": "done"}, {"workload": "b", "status": "failed"},
        {"workload": "c", "status": "partial: time budget"}, {"workload": "d", "status": "not run: time budget"}]}
    assert [e["workload"] for e in run.resumable(previous)] == ["a", "b"]
    assert run.resumable(None) == []
    assert run.earlier_runs(previous) == [{"date": "2026-12-03"}, {"date": "2026-12-04"}]


def test_repredict_on_an_unchanged_model_gives_the_same_predictions(tmp_path: Path) -> None:
    out = _corpus(tmp_path)
    before = json.loads((out / "corpus.json").read_text())
    assert repredict.main([str(out), "--out", str(tmp_path / "again")]) == 0
    after = json.loads((tmp_path / "again" / "corpus.json").read_text())
    row, again = before["workloads"][0]["remedies"][0], after["workloads"][0]["remedies"][0]
    assert (again["finding"]["id"], again["method"]) == ("GD101", "replay")
    for key in ("predicted", "method", "finding", "named", "cross_checks", "error", "within_30", "realized", "pairs"):
        assert again[key] == row[key], key
    assert again["diagnosed"]["predicted"] == row["predicted"]
    entry = after["workloads"][0]
    assert entry["prediction"]["replay"] == "primary window replayed again"
    assert after["meta"]["repredicted"]["workloads"] == [NAME]
    assert after["meta"]["repredicted"]["gpudoctor"] == run.gpudoctor_version()
    assert after["meta"]["repredicted"]["commit"] == "0123456789ab"
    assert "Predictions made again from the kept sessions" in (tmp_path / "again" / "corpus.md").read_text()


def test_repredict_follows_a_changed_replay_and_keeps_the_realized_gain(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import gpudoctor.replay

    out = _corpus(tmp_path, realized=4.0)
    original = gpudoctor.replay.replay_or_error
    calls = []

    def slower_data_fix(*args: Any, **kwargs: Any) -> Any:
        """A replay model in which removing the data wait saves half of what it did."""
        replay = original(*args, **kwargs)
        calls.append(replay)
        base = replay.baseline_span_us
        replay.scenarios = [dataclasses.replace(s, span_us=base - (base - s.span_us) / 2) if s.name == "data" else s
                            for s in replay.scenarios]
        replay.combined = {k: base - (base - v) / 2 for k, v in replay.combined.items()}
        return replay

    monkeypatch.setattr(gpudoctor.replay, "replay_or_error", slower_data_fix)
    before = json.loads((out / "corpus.json").read_text())["workloads"][0]["remedies"][0]
    assert repredict.main([str(out)]) == 0
    assert len(calls) == 1
    after = json.loads((out / "corpus.json").read_text())
    row = after["workloads"][0]["remedies"][0]
    assert row["finding"]["id"] in ("GD101", "GD102") and row["method"] == "replay"
    assert row["predicted"] < before["predicted"] - 1.0  # 5.4x before: the data fix now saves half the time
    assert (row["realized"], row["pairs"]) == (before["realized"], before["pairs"])
    assert row["error"] == pytest.approx(row["predicted"] / row["realized"] - 1, abs=1e-3)
    assert row["diagnosed"]["predicted"] == before["predicted"]
    # a second pass keeps the first prediction in `diagnosed`
    monkeypatch.setattr(gpudoctor.replay, "replay_or_error", original)
    assert repredict.main([str(out)]) == 0
    third = json.loads((out / "corpus.json").read_text())["workloads"][0]["remedies"][0]
    assert third["predicted"] == before["predicted"] and third["diagnosed"]["predicted"] == before["predicted"]


def test_repredict_follows_a_changed_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that no longer names GD101/GD102 turns the remedy's prediction into 'none named'."""
    out = _corpus(tmp_path)
    remedy = manifest.Remedy(REMEDY.name, ("GD105",))  # the manifest now says the remedy realizes GD105 only
    workload = manifest.Workload(NAME, "x.py", (), ("GD105",), (remedy,))
    monkeypatch.setattr(repredict.manifest, "WORKLOADS", (workload,))
    assert repredict.main([str(out)]) == 0
    row = json.loads((out / "corpus.json").read_text())["workloads"][0]["remedies"][0]
    assert (row["named"], row["predicted"], row["method"], row["targets"]) == (False, 1.0, "none named", ["GD105"])
    assert row["unnamed_over_1_5"] is True and row["diagnosed"]["named"] is True


def test_entries_without_a_kept_session_keep_their_predictions_and_say_why(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    row = {"workload": "w", "remedy": "r", "targets": ["GD101"], "predicted": 7.25, "method": "rule",
           "realized": 8.3, "named": True, "finding": {"id": "GD101", "severity": "critical"}}
    score.judge(row)
    results = {"schema": run.SCHEMA, "meta": {"date": "2026-12-04", "pairs": 2, "gpudoctor": "0.1.0", "torch": None},
               "workloads": [{"workload": "w", "status": "done", "notes": [], "remedies": [row],
                              "kept": {"why": "measured before run.py kept sessions"}}]}
    (out / "corpus.json").write_text(json.dumps(results))
    assert repredict.main([str(out)]) == 0
    after = json.loads((out / "corpus.json").read_text())
    assert after["workloads"][0]["remedies"][0]["predicted"] == 7.25
    assert "diagnosed" not in after["workloads"][0]["remedies"][0]
    assert after["meta"]["repredicted"]["not_repredicted"] == {"w": "measured before run.py kept sessions"}
    assert "- w: measured before run.py kept sessions" in (out / "corpus.md").read_text()


def test_the_record_is_scrubbed_of_machine_paths(tmp_path: Path) -> None:
    text = (f'"error": "exit 1: File \\"{tmp_path}/gd-corpus-a1b2/train.py\\", in {CORPUS}/synthetic.py", '
            '"python": "/opt/venv/bin/python3", "hostname": "node17"')
    scrubbed = keep.scrub_record(text)
    assert str(tmp_path) not in scrubbed and str(CORPUS) not in scrubbed and "/opt/venv" not in scrubbed
    assert '{tmp}/train.py' in scrubbed and "{corpus}/synthetic.py" in scrubbed and '"gpu-host"' in scrubbed


def test_the_primary_window_is_replayed_again_in_both_places_the_session_holds_it() -> None:
    data = json.loads((H200 / f"{NAME}.session.json").read_text())
    data["profile"]["index"] = 1
    data["profiles"] = [data["profile"], {**data["profile"], "index": 2, "label": "phase"}]
    session = Session.from_dict(data)
    other = session.profiles[1]
    recorded = other.replay
    assert len(session.windows()) == 2
    how = repredict.replay_primary(session, H200 / "windows" / f"{NAME}.trace.json.gz")
    assert how == "primary window replayed again; 1 other window(s) as recorded (no trace kept)"
    assert session.profile is not None and session.profile.replay is session.profiles[0].replay
    assert session.profile.replay is not recorded and other.replay is recorded
    assert len(session.windows()) == 2  # the primary still found among the windows, not listed twice
    assert session.profile.replay.baseline_span_us == pytest.approx(recorded.baseline_span_us, rel=1e-6)


def test_the_session_directory_a_trace_names_loses_its_machine_prefix(tmp_path: Path) -> None:
    """torch.profiler writes the trace's own path into it (`traceName`): the system's temporary directory
    gpudoctor's session was in. Kept, it becomes the session directory's own name."""
    trace = {"traceEvents": [], "traceName": f"{tmp_path}/gpudoctor-session-ab12/trace-99-1.json"}
    scrubbed = json.loads(gzip.decompress(keep.scrub(json.dumps(trace).encode(), [])))
    assert scrubbed["traceName"] == "gpudoctor-session-ab12/trace-99-1.json"
