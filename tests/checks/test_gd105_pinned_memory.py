"""GD105 pageable-memory on synthetic Sessions with known answers."""

from __future__ import annotations

import pytest
from helpers import make_loader, make_session, make_steps, run_check

from gpudoctor.checks.gd105_pinned_memory import run
from gpudoctor.model import Skip
from gpudoctor.session import ProfileSummary

MIB = 1024 * 1024


def profile(memcpy: dict, window_s: float = 0.5) -> ProfileSummary:
    return ProfileSummary(steps=10, window_s=window_s, kernel_count=1000, memcpy=memcpy)


def cuda_session(*, pin_memory: bool | None = False, prof: ProfileSummary | None = None, used: bool | None = True):
    return make_session(
        steps=make_steps(50, 0.05),
        loaders=[make_loader(num_workers=4, batches=50, batch_size=256, pin_memory=pin_memory)],
        profile=prof,
        torch_cuda_used=used,
    )


def test_large_pageable_copies_are_a_warning_with_gain():
    # 20 copies of 8 MiB taking 40 ms of a 500 ms window: 8%
    prof = profile({"HtoD_pageable": {"count": 20, "bytes": 20 * 8 * MIB, "us": 40_000.0},
                    "HtoD_pinned": {"count": 2, "bytes": 2 * MIB, "us": 200.0}})
    outcome, findings = run_check(run.check, cuda_session(prof=prof))
    assert outcome.status == "finding"
    (f,) = findings
    assert f.severity == "warning"
    assert f.evidence["pageable_htod_bytes"].value == 160 * MIB
    assert f.evidence["pageable_share"].value == pytest.approx(8.0)
    assert f.estimated_gain == pytest.approx(1 / 0.92)
    assert "pin_memory=False" in f.message  # the likely source is named
    assert "pin_memory=True" in (f.remedy.code or "") and "non_blocking=True" in (f.remedy.code or "")


def test_kineto_memcpy_names_are_recognised():
    prof = profile({"Memcpy HtoD (Pageable -> Device)": {"count": 10, "bytes": 10 * MIB, "us": 2_000.0}})
    (f,) = run(cuda_session(prof=prof))
    assert f.severity == "info"  # 0.4% of the window


def test_small_pageable_copies_are_ignored():
    prof = profile({"HtoD_pageable": {"count": 5000, "bytes": 5000 * 4096, "us": 50_000.0}})
    assert run(cuda_session(prof=prof)) == []


def test_small_copy_count_from_the_trace_reader_is_used():
    # the trace reader counts copies under 64 KB: 100 copies, all small, whatever their mean size
    only_small = profile({"HtoD_pageable": {"count": 100, "bytes": 100 * MIB, "us": 50_000.0, "small_count": 100}})
    assert run(cuda_session(prof=only_small)) == []
    some_large = profile({"HtoD_pageable": {"count": 100, "bytes": 40 * MIB, "us": 50_000.0, "small_count": 90}})
    (f,) = run(cuda_session(prof=some_large))
    assert f.evidence["pageable_large_copies"].value == 10


def test_unpinned_loader_costs_nothing_when_the_profile_shows_no_pageable_copies():
    prof = profile({"HtoD_pinned": {"count": 20, "bytes": 20 * 8 * MIB, "us": 10_000.0}})
    assert run(cuda_session(prof=prof)) == []


def test_unpinned_loader_without_profile_is_a_note():
    (f,) = run(cuda_session())
    assert f.severity == "info"
    assert f.evidence["unpinned_loaders"].value == ["1000:0"]
    assert "batch_size=256" in (f.remedy.code or "")


def test_pinned_loader_without_profile_passes():
    assert run(cuda_session(pin_memory=True)) == []


def test_unrecorded_pin_memory_is_not_assumed_false():
    with pytest.raises(Skip):
        run(cuda_session(pin_memory=None))


def test_cpu_only_run_is_skipped():
    outcome, findings = run_check(run.check, cuda_session(used=False))
    assert outcome.status == "skipped" and outcome.reason == "the run used no GPU"
    assert findings == []


def test_unknown_gpu_use_without_profile_is_skipped():
    with pytest.raises(Skip):
        run(cuda_session(used=None))
