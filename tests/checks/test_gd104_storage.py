"""GD104 slow-storage on synthetic Sessions with known answers."""

from __future__ import annotations

import pytest
from helpers import make_loader, make_session, make_steps, run_check

from gpudoctor.checks.gd104_storage import is_network, run
from gpudoctor.model import Skip
from gpudoctor.session import StorageProbe

MIB = 1024 * 1024


def probe(**fields) -> StorageProbe:
    defaults = {"path": "/data/train", "mount_point": "/data", "fs_type": "ext4", "kind": "local",
                "device": "vda", "rotational": False, "files_read": 64, "bytes_read": 64 * MIB,
                "read_latency_p50_ms": 0.2, "read_latency_p95_ms": 0.5, "throughput_mb_s": 900.0,
                "direct_io": True}
    defaults.update(fields)
    return StorageProbe(**defaults)


def session_with(p: StorageProbe, *, ratio: float | None = 0.05, wait_s: float = 0.040):
    loader = make_loader(num_workers=4, batches=50, fetch_s_per_batch=0.3, fetch_cpu_ratio=ratio)
    return make_session(steps=make_steps(50, 0.100, wait_s), loaders=[loader], storage=[p], usable_cores=8)


def test_rotational_flag_alone_is_never_a_finding():
    # virtio disks report rotational=1 on SSD-backed hosts: measured fast, no finding
    assert run(session_with(probe(rotational=True))) == []
    # and with nothing measured at all, still no finding from the flag
    unmeasured = probe(rotational=True, read_latency_p50_ms=None, read_latency_p95_ms=None, throughput_mb_s=None,
                       files_read=0, bytes_read=0)
    assert run(session_with(unmeasured)) == []


def test_network_filesystem_while_the_loader_waits_is_a_warning():
    p = probe(path="/mnt/nfs/train", mount_point="/mnt/nfs", fs_type="nfs4", kind="network", device="srv:/export",
              read_latency_p50_ms=3.1, throughput_mb_s=180.0)
    outcome, findings = run_check(run.check, session_with(p))
    assert outcome.status == "finding"
    (f,) = findings
    assert f.severity == "warning"
    assert "nfs4" in f.title
    assert f.evidence["fs_type"].value == "nfs4"
    assert f.evidence["mount_point"].value == "/mnt/nfs"
    assert f.evidence["read_latency_p50"].value == pytest.approx(3.1)
    assert f.evidence["read_latency_p50"].unit == "ms"
    assert f.evidence["throughput"].unit == "MB/s"
    assert f.evidence["stall_kind"].value == "waiting"
    assert f.estimated_gain == pytest.approx(1 / 0.6)


def test_network_filesystem_without_a_waiting_stall_is_a_note():
    p = probe(fs_type="nfs", kind="network")
    (f,) = run(session_with(p, wait_s=0.001))
    assert f.severity == "info"
    assert f.estimated_gain is None


def test_slow_local_disk_measured():
    p = probe(rotational=True, read_latency_p50_ms=12.0, read_latency_p95_ms=30.0, throughput_mb_s=40.0)
    (f,) = run(session_with(p))
    assert f.severity == "warning"
    assert "12.0 ms" in f.message and "40 MB/s" in f.message
    assert f.evidence["rotational_hint"].value is True


def test_slow_storage_but_cpu_bound_stall_is_a_note():
    p = probe(read_latency_p50_ms=12.0)
    (f,) = run(session_with(p, ratio=0.95))
    assert f.severity == "info"
    assert "cpu-bound" in f.message


def test_throughput_of_a_tiny_probe_is_not_judged():
    p = probe(bytes_read=1 * MIB, throughput_mb_s=20.0, read_latency_p50_ms=1.0)
    assert run(session_with(p)) == []


def test_remote_and_local_fuse():
    assert is_network(probe(fs_type="fuse.sshfs", kind="unknown"))
    assert is_network(probe(fs_type="fuse.gcsfuse", kind="unknown"))
    assert not is_network(probe(fs_type="fuse.lxcfs", kind="unknown"))
    assert not is_network(probe(fs_type="overlay", kind="overlay"))


def test_without_loader_timing_the_finding_says_so():
    session = make_session(storage=[probe(fs_type="cifs", kind="network")])
    (f,) = run(session)
    assert f.severity == "info"
    assert "not measured" in f.message


def test_skips_without_probe_or_when_the_probe_failed():
    outcome, _ = run_check(run.check, make_session())
    assert outcome.status == "skipped"
    with pytest.raises(Skip, match="probe failed"):
        run(make_session(storage=[probe(error="permission denied")]))
