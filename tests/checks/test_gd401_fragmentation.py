"""GD401 allocator-fragmentation on synthetic Sessions with known answers."""

from __future__ import annotations

from helpers import make_session, run_check

from gpudoctor.checks.gd401_fragmentation import run
from gpudoctor.session import AllocatorSnapshot

GIB = 2**30
TOTAL = 80 * GIB


def snap(label: str = "steady", allocated: float = 8, reserved: float = 10, inactive: float = 0.5,
         retries: int = 0, expandable: bool | None = False, t: float = 10.0) -> AllocatorSnapshot:
    return AllocatorSnapshot(t=t, label=label, allocated_bytes=int(allocated * GIB),
                             reserved_bytes=int(reserved * GIB), inactive_split_bytes=int(inactive * GIB),
                             max_allocated_bytes=int(allocated * GIB), max_reserved_bytes=int(reserved * GIB),
                             num_alloc_retries=retries, device_total_bytes=TOTAL, expandable_segments=expandable)


def alloc_session(*snaps: AllocatorSnapshot, **kw):
    session = make_session(torch_cuda_used=True, **kw)
    session.allocator = list(snaps)
    return session


def test_allocation_retries_are_a_warning_with_expandable_segments():
    outcome, findings = run_check(run.check, alloc_session(snap(), snap("end", retries=3, t=30.0)))
    assert outcome.status == "finding"
    (f,) = findings
    assert f.severity == "warning"
    assert f.title == "Allocator retried 3 allocation(s), flushing its cache each time"
    assert "synchronisation" in f.message
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in (f.remedy.code or "")
    assert f.evidence["num_alloc_retries"].value == 3


def test_fragmentation_on_a_roomy_device_is_info():
    (f,) = run(alloc_session(snap(allocated=6, reserved=10, inactive=3)))
    assert f.severity == "info"
    assert "30% of the reserved memory" in f.message
    assert f.evidence["fragmentation"].value == 30.0


def test_fragmentation_on_a_nearly_full_device_is_a_warning_and_names_the_cache():
    (f,) = run(alloc_session(snap(allocated=30, reserved=70, inactive=20)))
    assert f.severity == "warning"
    assert "holds back 40.0 GiB" in f.message
    assert "reserved 88% of it" in f.message


def test_expandable_segments_already_on_changes_the_remedy():
    (f,) = run(alloc_session(snap(allocated=6, reserved=10, inactive=3, expandable=True)))
    assert "already on" in f.remedy.text and f.remedy.code is None


def test_healthy_allocator_passes():
    outcome, findings = run_check(run.check, alloc_session(snap(inactive=0.3), snap("end", inactive=0.1)))
    assert outcome.status == "pass" and findings == []


def test_small_footprints_are_not_judged_on_ratios():
    assert run(alloc_session(snap(allocated=0.2, reserved=0.5, inactive=0.25))) == []


def test_skipped_with_only_an_oom_snapshot():
    outcome, _ = run_check(run.check, alloc_session(snap("oom", inactive=5)))
    assert outcome.status == "skipped" and "out-of-memory" in (outcome.reason or "")


def test_skipped_without_allocator_statistics():
    session = alloc_session(unavailable={"allocator": "no CUDA caching-allocator statistics"})
    outcome, _ = run_check(run.check, session)
    assert outcome.status == "skipped" and "allocator" in (outcome.reason or "")
