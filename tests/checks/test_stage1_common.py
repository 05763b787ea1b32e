"""What every stage-1 check owes the rest of gpudoctor: metadata, its page, JSON-safe findings."""

from __future__ import annotations

import importlib
import json

import pytest
from helpers import make_cpu_samples, make_gpu_samples, make_loader, make_session, make_steps

from gpudoctor.model import Check
from gpudoctor.session import ProfileSummary, Session, StorageProbe
from gpudoctor.verdict.build import finding_to_dict
from gpudoctor.verdict.engine import run_checks

STAGE1 = {
    "gd101_workers": ("GD101", "loader-workers"),
    "gd102_input_stall": ("GD102", "input-stall"),
    "gd103_cpu_saturation": ("GD103", "cpu-saturation"),
    "gd104_storage": ("GD104", "slow-storage"),
    "gd105_pinned_memory": ("GD105", "pageable-memory"),
}
PAGE_SECTIONS = ("What it detects", "Why it matters", "How it is measured", "Thresholds", "What to do", "Example")


def stage1_checks() -> list[Check]:
    return [importlib.import_module(f"gpudoctor.checks.{name}").run.check for name in STAGE1]


@pytest.mark.parametrize("module", sorted(STAGE1))
def test_metadata_and_documentation_page(module: str):
    check = importlib.import_module(f"gpudoctor.checks.{module}").run.check
    assert (check.id, check.slug) == STAGE1[module]
    assert check.stage == 1
    assert check.doc.startswith(f"{check.id} {check.slug}:")
    for section in PAGE_SECTIONS:
        assert section in check.doc, f"{check.id} page lacks '{section}'"
    assert "Bad" in check.doc and "Good" in check.doc


def test_a_session_without_data_skips_every_check_with_a_reason():
    result = run_checks(make_session(), stage1_checks())
    assert result.findings == []
    for outcome in result.outcomes:
        assert outcome.status == "skipped", outcome
        assert outcome.reason


def everything_wrong() -> Session:
    """One run with every stage-1 problem at once."""
    return make_session(
        steps=make_steps(50, 0.100, 0.060),
        loaders=[make_loader(num_workers=0, batches=50, batch_size=64, pin_memory=False,
                             fetch_s_per_batch=0.060, fetch_cpu_ratio=0.1)],
        cpu_samples=make_cpu_samples(20, system_percent=97.0, main_thread_percent=99.0, tree_percent=700.0),
        gpu_samples=make_gpu_samples(20, util_percent=30.0),
        storage=[StorageProbe(path="/mnt/nfs/train", mount_point="/mnt/nfs", fs_type="nfs4", kind="network",
                              files_read=100, bytes_read=50 * 2**20, read_latency_p50_ms=8.0,
                              throughput_mb_s=50.0)],
        profile=ProfileSummary(steps=10, window_s=1.0, kernel_count=500,
                               memcpy={"HtoD_pageable": {"count": 10, "bytes": 10 * 2**23, "us": 80_000.0}}),
        usable_cores=8,
        torch_cuda_used=True,
    )


def test_every_check_fires_on_a_run_with_every_problem_and_findings_serialise():
    result = run_checks(everything_wrong(), stage1_checks())
    assert {o.id: o.status for o in result.outcomes} == {cid: "finding" for cid, _ in STAGE1.values()}
    for finding in result.findings:
        data = finding_to_dict(finding)
        json.dumps(data, allow_nan=False)  # the report is JSON: no NaN, no objects
        assert finding.message and finding.remedy and finding.remedy.text
        for key, ev in finding.evidence.items():
            assert ev.value is not None, f"{finding.id}.{key} reports an unmeasured value"


def test_session_round_trip_gives_the_same_findings():
    session = everything_wrong()
    again = Session.from_dict(json.loads(json.dumps(session.to_dict())))
    first = run_checks(session, stage1_checks()).findings
    second = run_checks(again, stage1_checks()).findings
    assert [finding_to_dict(f) for f in first] == [finding_to_dict(f) for f in second]
