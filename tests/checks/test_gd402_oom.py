"""GD402 out-of-memory on synthetic Sessions with known answers."""

from __future__ import annotations

from helpers import make_session, run_check

from gpudoctor.analysis.memory import parse_oom_message
from gpudoctor.checks import gd401_fragmentation
from gpudoctor.checks.gd402_oom import run
from gpudoctor.session import AllocatorSnapshot, ErrorEvent
from gpudoctor.verdict.engine import run_checks

GIB = 2**30
MIB = 2**20

TORCH_2X_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
    "1.20 GiB is free. Including non-PyTorch memory, this process has 77.89 GiB memory in use. Of the "
    "allocated memory 76.50 GiB is allocated by PyTorch, and 310.00 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
TORCH_1X_MESSAGE = (
    "CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 15.78 GiB total capacity; 14.23 GiB already "
    "allocated; 2.19 MiB free; 14.50 GiB reserved in total by PyTorch)"
)


def oom_error(message: str = TORCH_2X_MESSAGE) -> ErrorEvent:
    """What the agent's excepthook records for an uncaught OOM."""
    return ErrorEvent(pid=100, kind="oom", type="torch.OutOfMemoryError", message=message, t=12.0,
                      traceback="Traceback (most recent call last): ...")


def observed(request: int, free: int) -> ErrorEvent:
    """What the session builder makes of PyTorch's OOM observer (fires for caught OOMs too)."""
    return ErrorEvent(pid=100, kind="oom", type="torch.cuda.OutOfMemoryError", t=12.0,
                      message=f"allocation of {request} bytes failed (device free {free} bytes)")


def oom_snapshot(allocated: float, reserved: float, requested: float | None, **kw) -> AllocatorSnapshot:
    return AllocatorSnapshot(t=12.0, label="oom", allocated_bytes=int(allocated * GIB),
                             reserved_bytes=int(reserved * GIB), num_ooms=1, device_total_bytes=80 * GIB,
                             device_free_bytes=GIB // 2,
                             requested_bytes=int(requested * GIB) if requested is not None else None, **kw)


def oom_session(errors=(), allocator=(), **kw):
    session = make_session(torch_cuda_used=True, **kw)
    session.errors = list(errors)
    session.allocator = list(allocator)
    return session


def test_uncaught_capacity_oom_from_the_exception_message():
    outcome, findings = run_check(run.check, oom_session([oom_error()], batch_size=512, exit_code=1))
    assert outcome.status == "finding"
    (f,) = findings
    assert f.severity == "critical" and "crashed" in f.title
    assert "at batch size 512" in f.message and "asking for 2.0 GiB" in f.message
    assert "76.5 GiB allocated to tensors" in f.message and "on a device of 79.1 GiB, 1.2 GiB free" in f.message
    assert f.evidence["cause"].value == "capacity"
    assert "autocast" in (f.remedy.code or "") and "checkpoint" in (f.remedy.code or "")


def test_caught_fragmentation_oom_from_the_observer_snapshot():
    session = oom_session(allocator=[oom_snapshot(allocated=60, reserved=75, requested=2, inactive_split_bytes=14 * GIB,
                                                  expandable_segments=False)])
    (f,) = run(session)
    assert f.severity == "warning" and "caught" in f.title
    assert "(caught by the program, 1 time)" in f.message
    assert f.evidence["cause"].value == "fragmentation"
    assert "15.0 GiB was reserved but unallocated (plus 512.0 MiB free on the device), enough" in f.message
    assert "expandable_segments:True" in (f.remedy.code or "")
    assert f.evidence["inactive_split"].value == 14.0


def test_fragmentation_that_only_contributed_gives_both_remedies():
    (f,) = run(oom_session(allocator=[oom_snapshot(allocated=7, reserved=8, requested=2)]))
    assert f.evidence["cause"].value == "both"
    assert "expandable_segments:True" in (f.remedy.code or "") and "autocast" in (f.remedy.code or "")


def test_cached_plus_free_memory_covering_the_request_is_fragmentation():
    # 1 GiB cached unused + 1.5 GiB free >= 2 GiB: the memory existed, split
    snap = oom_snapshot(allocated=7, reserved=8, requested=2)
    snap.device_free_bytes = int(1.5 * GIB)
    (f,) = run(oom_session(allocator=[snap]))
    assert f.evidence["cause"].value == "fragmentation"


def test_observer_only_with_a_clean_exit_is_a_caught_oom_with_its_request():
    snap = oom_snapshot(allocated=7, reserved=7.1, requested=None)
    snap.num_ooms = 3
    session = oom_session([observed(2 * GIB, GIB // 4)], allocator=[snap], exit_code=0)
    (f,) = run(session)
    assert f.severity == "warning" and "(caught by the program, 3 times)" in f.message
    assert f.evidence["requested"].value == 2.0 and f.evidence["cause"].value == "capacity"


def test_observer_only_then_a_failed_exit_is_critical():
    session = oom_session([observed(2 * GIB, 0)], allocator=[oom_snapshot(7, 7.1, None)], exit_code=1)
    (f,) = run(session)
    assert f.severity == "critical" and "exited with code 1" in f.message


def test_num_ooms_in_a_later_snapshot_without_numbers():
    end = AllocatorSnapshot(t=30.0, label="end", allocated_bytes=GIB, reserved_bytes=2 * GIB, num_ooms=2)
    (f,) = run(oom_session(allocator=[end]))
    assert f.severity == "warning" and f.evidence["oom_count"].value == 2
    assert f.evidence["cause"].value == "unknown" and "cannot be told apart" in f.message


def test_parse_both_message_generations():
    new = parse_oom_message(TORCH_2X_MESSAGE)
    assert new["requested"] == 2 * GIB and new["unallocated"] == 310 * MIB
    assert new["allocated"] == int(76.5 * GIB) and new["free"] == int(1.2 * GIB)
    old = parse_oom_message(TORCH_1X_MESSAGE)
    assert old["requested"] == 512 * MIB and old["reserved"] == int(14.5 * GIB)
    assert old["total"] == int(15.78 * GIB) and old["allocated"] == int(14.23 * GIB)


def test_old_message_fills_reserved():
    (f,) = run(oom_session([oom_error(TORCH_1X_MESSAGE)]))
    assert f.evidence["reserved"].value == 14.5 and f.evidence["cause"].value == "capacity"


def test_no_oom_passes():
    other = ErrorEvent(pid=1, kind="exception", type="ValueError", message="bad input")
    snap = AllocatorSnapshot(t=30.0, label="end", allocated_bytes=GIB, reserved_bytes=2 * GIB)
    outcome, findings = run_check(run.check, oom_session([other], allocator=[snap]))
    assert outcome.status == "pass" and findings == []


def test_skipped_when_caught_ooms_cannot_be_seen():
    session = oom_session(unavailable={"allocator": "no CUDA caching-allocator statistics"})
    outcome, _ = run_check(run.check, session)
    assert outcome.status == "skipped" and "allocator" in (outcome.reason or "")


def test_fragmentation_finding_explains_the_oom():
    session = oom_session(allocator=[
        AllocatorSnapshot(t=5.0, label="steady", allocated_bytes=30 * GIB, reserved_bytes=70 * GIB,
                          inactive_split_bytes=20 * GIB, num_alloc_retries=4, device_total_bytes=80 * GIB),
        oom_snapshot(allocated=60, reserved=75, requested=2),
    ])
    result = run_checks(session, [gd401_fragmentation.run.check, run.check])
    # the OOM is the root finding (its message names fragmentation as the cause);
    # the allocation retries that preceded it are shown as its consequence
    oom = next(f for f in result.findings if f.id == "GD402")
    frag = next(f for f in result.findings if f.id == "GD401")
    assert oom.consequence_of is None and frag.consequence_of == "GD402"
    assert "fragment" in oom.message.lower()


CAPPED_MESSAGE = (  # torch 2.11 on an H200 with set_per_process_memory_fraction(0.10)
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
    "126.87 GiB is free. Including non-PyTorch memory, this process has 12.93 GiB memory in use. 13.98 GiB "
    "allowed; Of the allocated memory 12.19 GiB is allocated by PyTorch, and 991.00 KiB is reserved by "
    "PyTorch but unallocated."
)


def test_a_per_process_cap_puts_the_device_free_memory_out_of_reach():
    (f,) = run(oom_session([oom_error(CAPPED_MESSAGE)], exit_code=1))
    assert f.evidence["allowed"].value == 13.98
    assert f.evidence["cause"].value == "capacity"  # 127 GiB free on the device, but 1.8 GiB within the cap
    assert "capped at 14.0 GiB" in f.message


def test_under_a_cap_cached_memory_plus_the_caps_headroom_is_fragmentation():
    message = CAPPED_MESSAGE.replace("12.19 GiB is allocated", "9.00 GiB is allocated").replace(
        "991.00 KiB is reserved", "1.50 GiB is reserved")
    (f,) = run(oom_session([oom_error(message)], exit_code=1))
    # 1.5 GiB cached unused + (13.98 - 10.5) GiB the cap still allows >= 2 GiB
    assert f.evidence["cause"].value == "fragmentation"
    assert "within the process's cap" in f.message


def test_the_snapshot_of_the_failure_wins_over_the_one_after_unwinding():
    at_failure = oom_snapshot(allocated=12, reserved=12.2, requested=None)
    unwound = oom_snapshot(allocated=8, reserved=12.2, requested=None)
    unwound.t = 12.02
    (f,) = run(oom_session([observed(2 * GIB, 0), oom_error()], allocator=[at_failure, unwound], exit_code=1))
    assert f.evidence["allocated"].value == 12.0


def test_an_oom_that_ended_the_run_comes_before_earlier_stages():
    from gpudoctor.checks import gd304_fp32_matmul as gd304  # stage 3, ranked before stage 4 otherwise
    from gpudoctor.session import ProfileSummary

    profile = ProfileSummary(steps=5, window_s=1.0, kernel_count=100, kernel_total_us=900_000.0,
                             gpu_busy_us=950_000.0, gpu_idle_us=50_000.0, matmul_fp32_us=800_000.0,
                             matmul_total_us=800_000.0, matmul_tensor_core_us=0.0, tf32_enabled=False)
    session = oom_session([oom_error()], exit_code=1, profile=profile)
    result = run_checks(session, [gd304.run.check, run.check])
    assert [f.id for f in result.findings][:2] == ["GD402", "GD304"], [(f.id, f.severity) for f in result.findings]
