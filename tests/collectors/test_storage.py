"""The storage probe: classification, mount lookup and a real (small) read test."""

from __future__ import annotations

import os

from gpudoctor.collectors import storage


def test_classify_filesystems():
    assert storage.classify("nfs4") == "network"
    assert storage.classify("fuse.sshfs") == "network"
    assert storage.classify("lustre") == "network"
    assert storage.classify("tmpfs") == "tmpfs"
    assert storage.classify("overlay") == "overlay"
    assert storage.classify("ext4") == "local"
    assert storage.classify("xfs") == "local"
    assert storage.classify(None) == "unknown"


def test_probe_reads_the_dataset_and_measures(tmp_path):
    data = tmp_path / "dataset"
    data.mkdir()
    for i in range(6):
        (data / f"shard-{i}.bin").write_bytes(os.urandom(512 * 1024))
    result = storage.probe(str(data))
    assert result.error is None
    assert result.mount_point is not None and str(data).startswith(result.mount_point.rstrip("/") or "/")
    assert result.kind in ("local", "overlay", "tmpfs", "network")
    assert result.files_read == 6
    assert result.bytes_read == 6 * 512 * 1024
    assert result.read_latency_p50_ms is not None and result.read_latency_p50_ms >= 0
    assert result.throughput_mb_s is not None and result.throughput_mb_s > 0


def test_probe_of_an_empty_directory_says_why(tmp_path):
    result = storage.probe(str(tmp_path))
    assert result.files_read == 0
    assert result.error == "no readable files under the dataset path"


def test_probe_never_raises_on_a_missing_path(tmp_path):
    result = storage.probe(str(tmp_path / "gone"))
    assert result.files_read == 0
    assert result.error is not None


def test_too_little_data_gives_no_throughput(tmp_path):
    (tmp_path / "small.txt").write_text("x" * 100)
    result = storage.probe(str(tmp_path))
    assert result.files_read == 1
    assert result.throughput_mb_s is None  # 100 bytes say nothing about throughput
