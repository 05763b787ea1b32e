"""What storage is under the dataset: mount, filesystem kind, device, and a short read test.

The kernel's rotational flag is recorded as a hint only (virtio disks report 1 on
SSD-backed hosts). The read test is short and small (bounded bytes and time), reads
files the workload reads anyway, and bypasses the page cache with O_DIRECT where
the filesystem allows it, so it measures the device and does not evict the
workload's cached data.
"""

from __future__ import annotations

import logging
import mmap
import os
import statistics
import threading
import time
from pathlib import Path

import psutil

from gpudoctor.session import StorageProbe

log = logging.getLogger(__name__)

NETWORK_FS = {
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "cephfs", "ceph", "glusterfs",
    "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone", "fuse.juicefs", "fuse.goofys", "fuse.mountpoint-s3",
    "fuse.blobfuse", "fuse.blobfuse2", "fuse.glusterfs", "fuse.cephfs", "9p", "afs", "orangefs", "wekafs",
}
MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs"}
OVERLAY_FS = {"overlay", "overlayfs", "aufs", "fuse-overlayfs", "fuse.fuse-overlayfs"}

READ_BUDGET_S = 1.5
READ_BUDGET_BYTES = 64 << 20
READ_CHUNK = 1 << 20
MAX_FILES = 32
SCAN_LIMIT = 2000


def classify(fs_type: str | None) -> str:
    fs = (fs_type or "").lower()
    if fs in NETWORK_FS or fs.startswith(("nfs", "fuse.s3", "fuse.gcs")):
        return "network"
    if fs in MEMORY_FS:
        return "tmpfs"
    if fs in OVERLAY_FS:
        return "overlay"
    if not fs:
        return "unknown"
    return "local"


def find_mount(path: str) -> tuple[str | None, str | None, str | None]:
    """(mount point, fs type, device) of the longest mount point containing path."""
    best = None
    try:
        partitions = psutil.disk_partitions(all=True)
    except Exception:  # noqa: BLE001  (psutil failing costs only the mount facts)
        return None, None, None
    for part in partitions:
        mp = part.mountpoint
        contains = path == mp or path.startswith(mp.rstrip("/") + "/") or mp == "/"
        if contains and (best is None or len(mp) > len(best.mountpoint)):
            best = part
    if best is None:
        return None, None, None
    return best.mountpoint, best.fstype, best.device


def rotational(path: str) -> bool | None:
    """The kernel's rotational flag for the block device under path (a hint only)."""
    try:
        dev = os.stat(path).st_dev
        sys_dir = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve()
    except OSError:
        return None
    for directory in (sys_dir, sys_dir.parent):  # a partition's queue lives on its disk
        flag = directory / "queue" / "rotational"
        if flag.exists():
            try:
                return flag.read_text().strip() == "1"
            except OSError:
                return None
    return None


def _sample_files(root: str) -> list[str]:
    if os.path.isfile(root):
        return [root]
    files: list[str] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            seen += 1
            full = os.path.join(dirpath, name)
            try:
                if os.path.getsize(full) > 0:
                    files.append(full)
            except OSError:
                continue
            if seen >= SCAN_LIMIT:
                break
        if seen >= SCAN_LIMIT:
            break
    if len(files) > MAX_FILES:  # spread over the dataset rather than the first directory
        stride = len(files) / MAX_FILES
        files = [files[int(i * stride)] for i in range(MAX_FILES)]
    return files


def _read_file(path: str, buffer: mmap.mmap, budget_bytes: int) -> tuple[float, int, bool]:
    """(latency of the first 4 KiB in s, bytes read, whether O_DIRECT was used)."""
    direct = hasattr(os, "O_DIRECT")
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    except OSError:
        direct = False
        fd = os.open(path, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        try:
            first = os.readv(fd, [memoryview(buffer)[:4096]])
        except OSError:  # O_DIRECT refused at read time (e.g. tmpfs, some FUSE)
            os.close(fd)
            direct = False
            fd = os.open(path, os.O_RDONLY)
            t0 = time.perf_counter()
            first = os.readv(fd, [memoryview(buffer)[:4096]])
        latency = time.perf_counter() - t0
        total = first
        view = memoryview(buffer)
        while first > 0 and total < budget_bytes:
            n = os.readv(fd, [view[: min(READ_CHUNK, budget_bytes - total)]])
            if n <= 0:
                break
            total += n
            if n < 4096:
                break
        return latency, total, direct
    finally:
        os.close(fd)


def probe(path: str) -> StorageProbe:
    """Describe and briefly measure the storage under `path`. Never raises."""
    real = os.path.realpath(path)
    result = StorageProbe(path=path)
    try:
        result.mount_point, result.fs_type, result.device = find_mount(real)
        result.kind = classify(result.fs_type)
        result.rotational = rotational(real)
        files = _sample_files(real)
        if not files:
            result.error = "no readable files under the dataset path"
            return result
        buffer = mmap.mmap(-1, READ_CHUNK)  # page-aligned, as O_DIRECT requires
        latencies: list[float] = []
        total_bytes = 0
        used_direct = True
        start = time.perf_counter()
        try:
            for name in files:
                if time.perf_counter() - start > READ_BUDGET_S or total_bytes >= READ_BUDGET_BYTES:
                    break
                try:
                    latency, n, direct = _read_file(name, buffer, min(4 << 20, READ_BUDGET_BYTES - total_bytes))
                except OSError:
                    continue
                latencies.append(latency)
                total_bytes += n
                used_direct = used_direct and direct
        finally:
            buffer.close()
        elapsed = time.perf_counter() - start
        result.files_read = len(latencies)
        result.bytes_read = total_bytes
        result.direct_io = used_direct if latencies else None
        if latencies:
            ordered = sorted(latencies)
            result.read_latency_p50_ms = round(statistics.median(ordered) * 1e3, 3)
            result.read_latency_p95_ms = round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1e3, 3)
        if elapsed > 0 and total_bytes >= 1 << 20:  # too little data says nothing about throughput
            result.throughput_mb_s = round(total_bytes / elapsed / 1e6, 1)
    except Exception as exc:
        log.debug("storage probe failed", exc_info=True)
        result.error = f"{type(exc).__name__}: {exc}"
    return result


MAX_PROBES = 4  # dataset locations probed per run


def probe_in_background(storage: dict[str, StorageProbe], threads: list[threading.Thread], path: str) -> None:
    """Probe `path` on a daemon thread (once per path, at most MAX_PROBES); until it finishes the
    entry says the probe did not finish, so a run that ends first still reports why."""
    if path in storage or len(storage) >= MAX_PROBES:
        return
    storage[path] = StorageProbe(path=path, error="probe did not finish")

    def work() -> None:
        storage[path] = probe(path)

    thread = threading.Thread(target=work, name="gpudoctor-storage", daemon=True)
    threads.append(thread)
    thread.start()
