"""PF4xx on real host probes: tmp dirs for disk and /dev/shm, fake sysfs, monkeypatched limits."""

from __future__ import annotations

import os
import resource
from types import SimpleNamespace

import psutil
import pytest
from preflight_helpers import idle_gpu, sysfs

from gpudoctor.preflight import host
from gpudoctor.preflight.policy import UNLIMITED, Policy

MIB, GIB = 2**20, 2**30


def _statvfs(monkeypatch, size: int, free: int) -> None:
    real = os.statvfs

    def fake(path):
        st = real(path)
        return SimpleNamespace(f_blocks=size // 4096, f_frsize=4096, f_bavail=free // 4096, f_bsize=st.f_bsize)

    monkeypatch.setattr(os, "statvfs", fake)


def test_usable_cores_per_gpu(make_ctx, monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(host, "cgroup_quota_cores", lambda root: None)
    eight = [idle_gpu(i) for i in range(8)]
    result = host.usable_cores(make_ctx(eight))
    assert result.status == "warn" and "2.0 per GPU" in result.found
    assert host.usable_cores(make_ctx(eight[:2])).status == "pass"
    assert host.usable_cores(make_ctx(eight[:2], policy=Policy(min_cores_per_gpu=12))).status == "fail"
    monkeypatch.setattr(host, "cgroup_quota_cores", lambda root: 2.5)
    quota = host.usable_cores(make_ctx(eight[:1]))
    assert quota.status == "warn" and "cgroup quota 2.5 cores" in quota.found


def test_governor(make_ctx, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    fast = host.cpu_governor(make_ctx(sys_root=sysfs(tmp_path / "a", governors={0: "performance", 1: "performance"})))
    assert fast.status == "pass" and fast.found.startswith("performance on 2 cores")
    slow_root = sysfs(tmp_path / "b", governors={0: "powersave", 1: "performance"})
    assert host.cpu_governor(make_ctx(sys_root=slow_root)).status == "warn"
    assert (
        host.cpu_governor(make_ctx(sys_root=slow_root, policy=Policy(require_performance_governor=True))).status
        == "fail"
    )
    assert host.cpu_governor(make_ctx(sys_root=sysfs(tmp_path / "c"))).status == "not-checked"


@pytest.mark.parametrize(
    "size, policy, status",
    [
        (64 * MIB, Policy(), "fail"),
        (512 * MIB, Policy(), "warn"),
        (8 * GIB, Policy(), "pass"),
        (8 * GIB, Policy(min_shm_bytes=16 * GIB), "fail"),
        (512 * MIB, Policy(min_shm_bytes=256 * MIB), "pass"),
    ],
)
def test_shm_size(make_ctx, tmp_path, monkeypatch, size: int, policy: Policy, status: str) -> None:
    _statvfs(monkeypatch, size, size // 2)
    assert host.shm_size(make_ctx(policy=policy, shm_path=tmp_path)).status == status


def test_no_dev_shm_is_not_checked(make_ctx, tmp_path) -> None:
    result = host.shm_size(make_ctx(shm_path=tmp_path / "missing"))
    assert result.status == "not-checked" and "not Linux" in (result.reason or "")


def test_memlock(make_ctx, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda which: (8 * MIB, 8 * MIB))
    plain = host.memlock_limit(make_ctx(sys_root=sysfs(tmp_path / "a")))
    assert plain.status == "pass" and "not charged" in plain.found
    rdma = host.memlock_limit(make_ctx(sys_root=sysfs(tmp_path / "b", rdma=["mlx5_0"])))
    assert rdma.status == "warn" and "mlx5_0" in rdma.found
    assert host.memlock_limit(make_ctx(policy=Policy(min_memlock_bytes=UNLIMITED))).status == "fail"
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert host.memlock_limit(make_ctx(policy=Policy(min_memlock_bytes=UNLIMITED))).status == "pass"


def test_open_files(make_ctx, monkeypatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 524288))
    low = host.open_files_limit(make_ctx())
    assert low.status == "warn" and low.fix_code == "ulimit -n 65536" and "file_descriptor" in low.found
    assert host.open_files_limit(make_ctx(policy=Policy(min_open_files=2048))).status == "fail"
    monkeypatch.setattr(resource, "getrlimit", lambda which: (65536, 65536))
    assert host.open_files_limit(make_ctx()).status == "pass"


def test_swap(make_ctx, monkeypatch) -> None:
    memory = SimpleNamespace(total=64 * GIB, available=30 * GIB)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory)
    monkeypatch.setattr(psutil, "swap_memory", lambda: SimpleNamespace(total=0, used=0))
    assert host.swap_in_use(make_ctx()).found == "no swap configured"
    monkeypatch.setattr(psutil, "swap_memory", lambda: SimpleNamespace(total=8 * GIB, used=3 * GIB))
    assert host.swap_in_use(make_ctx()).status == "warn"
    assert host.swap_in_use(make_ctx(policy=Policy(max_swap_used_bytes=4 * GIB))).status == "pass"


@pytest.mark.parametrize(
    "free, size, status",
    [
        (500 * MIB, 100 * GIB, "fail"),
        (5 * GIB, 100 * GIB, "warn"),
        (50 * GIB, 2000 * GIB, "warn"),
        (50 * GIB, 100 * GIB, "pass"),
    ],
)
def test_checkpoint_disk(make_ctx, tmp_path, monkeypatch, free: int, size: int, status: str) -> None:
    _statvfs(monkeypatch, size, free)
    assert host.checkpoint_disk(make_ctx(checkpoint_dir=tmp_path)).status == status


def test_checkpoint_dir_not_created_yet_uses_its_filesystem(make_ctx, tmp_path) -> None:
    result = host.checkpoint_disk(make_ctx(checkpoint_dir=tmp_path / "runs" / "ckpt"))
    assert result.status in ("pass", "warn", "fail") and "not created yet" in result.found
    assert (
        host.checkpoint_disk(make_ctx(checkpoint_dir=tmp_path, policy=Policy(min_free_disk_bytes=2**60))).status
        == "fail"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_read_only_checkpoint_dir_fails(make_ctx, tmp_path) -> None:
    tmp_path.chmod(0o500)
    try:
        result = host.checkpoint_disk(make_ctx(checkpoint_dir=tmp_path))
    finally:
        tmp_path.chmod(0o700)
    assert result.status == "fail" and "not writable" in result.found


def test_real_probes_on_this_machine_never_raise(make_ctx) -> None:
    results = host.probe(make_ctx())
    assert [r.id for r in results] == ["PF401", "PF402", "PF403", "PF404", "PF405", "PF406", "PF407"]
    for r in results:
        assert r.status != "not-checked" or r.reason
