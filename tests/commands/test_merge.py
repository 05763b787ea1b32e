"""`gpudoctor merge`: one report from the Sessions of the nodes of one job; bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import make_session, make_steps

from gpudoctor import cli
from gpudoctor.base import exitcodes
from gpudoctor.session import RankInfo, Session, StepRecord, Steps
from gpudoctor.session.merge_nodes import MergeError, merge_sessions


def _node(host: str, ranks: list[int], *, world: int = 4, job: str | None = "job-1",
          own: dict[int, float] | None = None) -> Session:
    infos = []
    for rank in ranks:
        backward = 0.045 - (own or {}).get(rank, 0.0)
        records = [StepRecord(t=0.05 * (i + 1), duration_s=0.05, data_wait_s=0.001, backward_s=backward)
                   for i in range(20)]
        infos.append(RankInfo(rank=rank, pid=100 + rank, host=host, world_size=world, local_world_size=len(ranks),
                              backend="gloo", steps=Steps(source="optimizer", count=21, records=records,
                                                          warmup_steps=2)))
    session = make_session(steps=make_steps(20, 0.05), ranks=infos, job_id=job, primary_rank=min(ranks))
    session.environment.hostname = host
    return session


def _save(tmp_path: Path, name: str, session: Session) -> str:
    path = tmp_path / f"{name}.session.json"
    session.save(path)
    return str(path)


def test_merge_finds_a_straggler_on_another_node(tmp_path, capsys):
    a = _save(tmp_path, "a", _node("node-a", [0, 1]))
    b = _save(tmp_path, "b", _node("node-b", [2, 3], own={3: 0.03}))
    out = tmp_path / "out"
    assert cli.main(["merge", b, a, "--out", f"{out}/", "--quiet"]) == 0
    report = json.loads(next(p for p in out.glob("*.json") if not p.name.endswith(".session.json")).read_text())
    rows = report["ranks"]["rows"]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert [r["host"] for r in rows] == ["node-a", "node-a", "node-b", "node-b"]
    assert report["ranks"]["hosts"] == ["node-a", "node-b"] and report["ranks"]["primary_rank"] == 0
    straggler = next(f for f in report["findings"] if f["id"] == "GD501")
    assert straggler["evidence"]["rank"]["value"] == 3
    assert "node-b" in straggler["message"]
    merged = Session.load(next(out.glob("*.session.json")))
    assert merged.environment.hostname == "node-a"  # the primary view is rank 0's node
    assert len(merged.ranks) == 4


def test_missing_ranks_are_noted():
    merged = merge_sessions([("a", _node("node-a", [0, 1])), ("c", _node("node-c", [3]))])
    assert any("1 of 4 ranks are missing" in note and note.endswith("2") for note in merged.notes)


@pytest.mark.parametrize("second, message", [
    (lambda: _node("node-b", [2, 3], job="job-2"), "different jobs"),
    (lambda: _node("node-b", [2, 3], world=8), "world size"),
    (lambda: _node("node-b", [1, 2]), "rank 1 is recorded twice"),
    (lambda: make_session(steps=make_steps(5, 0.1)), "not a distributed job"),
])
def test_sessions_that_are_not_one_job_are_refused(tmp_path, capsys, second, message):
    a = _save(tmp_path, "a", _node("node-a", [0, 1]))
    b = _save(tmp_path, "b", second())
    assert cli.main(["merge", a, b, "--out", str(tmp_path / "out")]) == exitcodes.DIFFERENT_RUNS == 75
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(MergeError):
        merge_sessions([("a", Session.load(Path(a))), ("b", Session.load(Path(b)))])


def test_unreadable_and_missing_inputs(tmp_path, capsys):
    a = _save(tmp_path, "a", _node("node-a", [0, 1]))
    bad = tmp_path / "bad.session.json"
    bad.write_text("{not json")
    assert cli.main(["merge", a, str(bad)]) == exitcodes.BAD_DATA
    assert cli.main(["merge", a, str(tmp_path / "nope.session.json")]) == exitcodes.NOT_FOUND
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2


def test_a_thousand_nodes_merge_into_a_session_report_accepts(tmp_path):
    """issue 27 item 11: merging 1,000 node sessions wrote a session `report` refused (1,001 notes)."""
    nodes = []
    for rank in range(1000):
        session = _node(f"node-{rank}", [rank], world=1000)
        session.notes.append(f"a note of node {rank}")
        nodes.append((f"n{rank}", session))
    merged = merge_sessions(nodes)
    path = tmp_path / "merged.session.json"
    merged.save(path)
    again = Session.load(path)  # what `gpudoctor report` does first
    assert len(again.ranks) == 1000
    assert any("more notes of the merged sessions are left out" in note for note in again.notes)
    assert any(note.startswith("merged from 1000 sessions") for note in again.notes)


def test_a_rank_outside_the_world_is_refused(tmp_path, capsys):
    """issue 27 item 11: rank 7 in a world of 4 was accepted silently."""
    with pytest.raises(MergeError, match=r"rank 7 .* world of 4 ranks"):
        merge_sessions([("a", _node("node-a", [0, 1])), ("b", _node("node-b", [2, 7]))])
    a = _save(tmp_path, "a", _node("node-a", [0, 1]))
    b = _save(tmp_path, "b", _node("node-b", [2, 7]))
    assert cli.main(["merge", a, b, "--out", str(tmp_path / "out"), "--quiet"]) == exitcodes.DIFFERENT_RUNS
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rank 7" in err[0]
