"""The accuracy corpus's manifest is complete (issue 25): enough workloads, enough public ones, every cause covered."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers import load_corpus_module

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"




manifest = load_corpus_module("manifest")
fetch = load_corpus_module("fetch")
handfix = load_corpus_module("handfix")


def test_the_corpus_has_30_workloads_half_of_them_public() -> None:
    workloads = manifest.WORKLOADS
    assert len(workloads) >= 30
    assert sum(1 for w in workloads if w.source is not None) >= 15
    assert len({w.name for w in workloads}) == len(workloads)


def test_every_cause_gd101_to_gd402_is_covered() -> None:
    covered = {cause for w in manifest.WORKLOADS for cause in w.causes}
    assert set(manifest.CAUSES) <= covered
    assert set(manifest.CAUSES) == {"GD101", "GD102", "GD103", "GD104", "GD105", "GD201", "GD202", "GD203",
                                    "GD301", "GD302", "GD303", "GD304", "GD305", "GD306", "GD401", "GD402"}


def test_every_workload_has_a_remedy_that_changes_something() -> None:
    for w in manifest.WORKLOADS:
        assert w.remedies, w.name
        assert len({r.name for r in w.remedies}) == len(w.remedies), w.name
        for r in w.remedies:
            changed = (r.args is not None and r.args != w.args) or r.env or r.handfix
            assert changed, f"{w.name}: {r.name} is the baseline"
            assert set(r.targets) <= set(manifest.CAUSES), f"{w.name}: {r.name}"
            assert r.step_scale > 0


def test_public_workloads_name_a_pinned_commit_and_their_script() -> None:
    for w in manifest.WORKLOADS:
        if w.source is None:
            assert "{public}" not in w.script, w.name
            continue
        assert re.fullmatch(r"[0-9a-f]{40}", w.source.commit), w.name
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", w.source.repo), w.name
        assert w.script.endswith("/" + w.source.paths[0]), w.name  # the script is the source's first path
        assert w.script.startswith("{public}/" + w.source.folder + "/"), w.name
        assert w.source.license


def test_generated_data_and_hand_fixes_exist() -> None:
    fixes = {"tf32", "cudnn-benchmark", "fused-optimizer", "pin-memory"}
    for w in manifest.WORKLOADS:
        assert set(w.data) <= set(fetch.GENERATORS), w.name
        for r in w.remedies:
            for fix in r.handfix:
                assert fix in fixes or re.fullmatch(r"workers=\d+", fix), f"{w.name}: {fix}"


# the replay what-if (gpudoctor.replay.scenarios) each hand fix realizes; a remedy named "fused ..." is
# a fused optimizer whether a hand fix or the script's own flag makes it
def _what_ifs(remedy) -> set[str | None]:  # type: ignore[no-untyped-def]
    made = {"fused-optimizer": "optimizer", "tf32": "tf32", "pin-memory": "pinned"}
    found = {"data" if re.fullmatch(r"workers=\d+", fix) else made.get(fix) for fix in remedy.handfix}
    return found | ({"optimizer"} if remedy.name.startswith("fused") else set())


def test_a_remedy_targets_only_findings_whose_replay_it_realizes() -> None:
    """A remedy is scored against its targets' predicted gains: each target must price what the remedy
    changes. A fused optimizer realizes GD305's what-if (optimizer.step()'s launches), not GD301's (the
    model's launch chains, optimizer.step() left as measured): scored against GD301, the DDP tutorial's
    fused SGD read compile's 2.44x and realized 1.31x."""
    from gpudoctor.verdict import registry

    priced = {c.id: set(c.fix.scenarios) for c in registry.load_checks()[0] if c.fix is not None}
    checked = 0
    for w in manifest.WORKLOADS:
        for r in w.remedies:
            made = _what_ifs(r)
            if not made or None in made:
                continue  # a fix the replay has no what-if for (cudnn-benchmark), or none by hand
            for target in r.targets:
                assert priced[target] & made, f"{w.name}: {r.name} realizes {made}, {target} prices {priced[target]}"
                checked += 1
    assert checked >= 10  # the TF32, workers, pinned and fused remedies


def test_the_fused_optimizer_fix_takes_an_optimizer_built_before_the_model_moves(monkeypatch) -> None:
    # the DDP tutorial and Fabric's examples build the optimizer on CPU parameters, then move them
    torch = pytest.importorskip("torch")
    for cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
        monkeypatch.setattr(cls, "__init__", cls.__init__)  # restored after the test
    handfix.apply(["fused-optimizer"])
    params = list(torch.nn.Linear(4, 1).parameters())
    assert torch.optim.SGD(params, lr=0.1).defaults["fused"] is True
    assert torch.optim.AdamW(params).defaults["fused"] is True
    assert not torch.optim.SGD(params, lr=0.1, foreach=True).defaults["fused"]  # the script's own choice stays


def test_placeholders_expand(tmp_path: Path) -> None:
    for w in manifest.WORKLOADS:
        for text in (w.script, w.cwd, *w.args, *(a for r in w.remedies for a in (r.args or ()))):
            expanded = manifest.expand(text, public=tmp_path / "public", tmp=tmp_path / "run")
            assert "{" not in expanded, f"{w.name}: {text}"


@pytest.mark.integration
def test_fetch_takes_the_pinned_commit_from_a_local_mirror(tmp_path: Path) -> None:
    mirror = tmp_path / "mirrors" / "owner+name" / "repo"
    mirror.mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(mirror), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    (mirror / "pkg").mkdir()
    (mirror / "train.py").write_text("print('pinned')\n")
    (mirror / "pkg" / "util.py").write_text("X = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    pinned = git("rev-parse", "HEAD")
    (mirror / "train.py").write_text("print('later')\n")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")
    found = fetch.find_mirror(tmp_path / "mirrors", "owner/name")
    assert found == mirror
    source = manifest.Source("owner/name", pinned, ("train.py", "pkg", "missing.py"), "MIT")
    missing = fetch.materialise(source, found, tmp_path / "public")
    assert (tmp_path / "public" / "owner+name" / "train.py").read_text() == "print('pinned')\n"
    assert (tmp_path / "public" / "owner+name" / "pkg" / "util.py").exists()
    assert len(missing) == 1 and missing[0].startswith("missing.py")
    assert fetch.find_mirror(tmp_path / "mirrors", "owner/other") is None
