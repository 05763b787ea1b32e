"""GD104 slow-storage: the dataset lives on slow or network storage.

What it detects
    The filesystem under the dataset is a network or remote filesystem (NFS, SMB/CIFS,
    Lustre, GPFS, CephFS, 9p, S3/GCS/Azure FUSE mounts...), or a read probe of the
    dataset's files measured slow reads: a median latency of a spinning disk or worse,
    or a throughput below what one hard disk streams.

    The kernel's ``rotational`` flag alone never produces a finding: virtio disks
    report ``rotational=1`` on SSD-backed cloud hosts. It is shown as a hint beside
    measured numbers only.

Why it matters
    Random reads of many small files are the worst case for every storage that is not
    local flash: each sample pays a seek or a network round trip, and the loader's
    workers sit idle waiting for bytes. No number of CPU cores fixes that.

How it is measured
    The supervisor finds the dataset's location (from the dataset object, or the
    paths the workload named), reads the mount table for the filesystem type and
    device, and times reads of a sample of the dataset's files (median and 95th
    percentile latency per read, throughput). When the page cache could not be
    bypassed, cached files look faster than the disk: a slow result is real, a fast
    one may be optimistic. Whether the pipeline is actually waiting comes from GD102's
    classification of the stall (CPU time far below wall time while producing batches).

Thresholds, and where they come from
    - Median read latency >= {{SLOW_LATENCY_MS}}: the seek time of a hard disk (4-10 ms); local SSDs
      answer in well under 0.5 ms, NVMe in about 0.1 ms.
    - Throughput < {{SLOW_THROUGHPUT_MB_S}}: below what a single hard disk streams (100-200 MB/s);
      SATA SSDs give about 500 MB/s, NVMe several GB/s. Judged only when the probe read
      at least {{MIN_BYTES_FOR_THROUGHPUT}}, since on less the figure is per-file latency in disguise.
    - Severity: a warning when the loop waits for data (>= {{WAIT_SHARE_WARNING}} of the step, GD102) and
      the stall is classified ``waiting`` (storage is then the likely cause); a note
      otherwise, because slow storage that the loader already hides costs nothing.

What to do
    Stage the dataset on local NVMe or in RAM (``/dev/shm``) before training; pack
    small files into large shards read sequentially (WebDataset tar shards, LMDB,
    Parquet); keep more reads in flight (more workers, a larger ``prefetch_factor``);
    on NFS, mount with a larger ``rsize`` and enable the client cache (``fsc``).

Example
    Bad: one small JPEG per sample, read at random from NFS::

        dataset = ImageFolder("/mnt/nfs/imagenet/train")

    Good: copied once to local disk (or packed into shards), then read locally::

        shutil.copytree("/mnt/nfs/imagenet/train", "/local_nvme/train", dirs_exist_ok=True)
        dataset = ImageFolder("/local_nvme/train")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.input_pipeline import STALL_LIMITS, InputStall, data_prediction
from gpudoctor.analysis.prediction import GAIN_WARNING, SEVERITY_GAINS
from gpudoctor.analysis.shared import analyses
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.model import Prediction
    from gpudoctor.session import Session, StorageProbe

SLOW_LATENCY_MS = Threshold(
    "median read latency: slow at or above", 5.0, "ms",
    "the seek time of a hard disk (4-10 ms); local SSDs answer in under 0.5 ms, NVMe in about "
    "0.1 ms")
SLOW_THROUGHPUT_MB_S = Threshold(
    "read throughput: slow below", 100.0, "MB/s",
    "below what one hard disk streams (100-200 MB/s); SATA SSDs give about 500 MB/s, NVMe "
    "several GB/s")
MIN_BYTES_FOR_THROUGHPUT = CountThreshold(
    "bytes the probe must read to judge throughput", 4 * 1024 * 1024, "bytes",
    "gpudoctor: on less, throughput is per-file latency in disguise")
LOCAL_COPY = "/local_nvme/dataset"  # a placeholder in the remedy: the user's fast local disk

NETWORK_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "afs", "9p", "davfs", "lustre", "gpfs", "ceph",
    "glusterfs", "beegfs", "wekafs", "orangefs", "pvfs2", "panfs", "quobyte",
})
# FUSE is local or remote depending on the daemon: only these are known to be remote
REMOTE_FUSE = frozenset({
    "sshfs", "s3fs", "gcsfuse", "rclone", "goofys", "mountpoint-s3", "juicefs", "blobfuse", "blobfuse2",
    "glusterfs", "ceph-fuse", "cephfs", "alluxio-fuse", "davfs", "lustre", "weka", "geesefs", "s3ql",
})


def is_network(probe: StorageProbe) -> bool:
    if probe.kind == "network":
        return True
    fs_type = (probe.fs_type or "").lower()
    if fs_type in NETWORK_FS:
        return True
    return fs_type.startswith("fuse.") and fs_type[len("fuse."):] in REMOTE_FUSE


def slow_reasons(probe: StorageProbe) -> list[str]:
    """What the read probe measured as slow (empty when fast or not measured)."""
    reasons = []
    if probe.read_latency_p50_ms is not None and probe.read_latency_p50_ms >= SLOW_LATENCY_MS:
        reasons.append(f"median read latency {probe.read_latency_p50_ms:.1f} ms (>= {SLOW_LATENCY_MS:g} ms)")
    if (probe.throughput_mb_s is not None and probe.bytes_read >= MIN_BYTES_FOR_THROUGHPUT
            and probe.throughput_mb_s < SLOW_THROUGHPUT_MB_S):
        reasons.append(f"throughput {probe.throughput_mb_s:.0f} MB/s (< {SLOW_THROUGHPUT_MB_S:g} MB/s)")
    return reasons


@check("GD104", "slow-storage", stage=1, title="Slow or network storage", requires=("storage",),
       thresholds=(*STALL_LIMITS, *SEVERITY_GAINS),
       fix=Fix(untried="storage speed belongs to the machine: stage the data on local disk or in RAM (see the "
               "finding)"), data_wait=True)
def run(session: Session) -> list[Finding]:
    if not session.storage:
        raise Skip("no storage probe (dataset location unknown)")
    probes = [p for p in session.storage if p.error is None]
    if not probes:
        raise Skip(f"storage probe failed: {session.storage[0].error}")
    found = analyses(session).input_stall if session.loaders else None
    findings = []
    seen: set[str] = set()
    for probe in probes:
        key = probe.mount_point or probe.path
        if key in seen:
            continue
        network = is_network(probe)
        reasons = slow_reasons(probe)
        if not (network or reasons):
            continue  # fast or unmeasured local storage; `rotational` alone is only a hint
        seen.add(key)
        findings.append(_finding(session, probe, network, reasons, found))
    return findings


def _finding(session: Session, probe: StorageProbe, network: bool, reasons: list[str],
             found: InputStall | None) -> Finding:
    prediction = data_prediction(session, found) if found is not None and found.significant else None
    # storage matters when the loader waits on it and that wait costs the GPU time
    waiting = (found is not None and found.significant and found.stall.kind == "waiting"
               and prediction is not None and prediction.gain >= GAIN_WARNING)
    where = probe.mount_point or probe.path
    fs = probe.fs_type or "unknown filesystem"
    evidence = _evidence(session, probe, network, found)

    kind = "a network filesystem" if network else "a filesystem"
    message = f"The dataset at {probe.path} sits on {kind} ({fs} mounted at {where})"
    message += (": " + "; ".join(reasons) + ". ") if reasons else ". "
    message += _wait_text(found, prediction, waiting)
    if network and not reasons:
        message += " Network filesystems serve large sequential reads well but many small random ones poorly."
    title = (f"Dataset on a network filesystem ({fs})" if network
             else "Slow storage under the dataset: " + ", ".join(r.split(" (")[0] for r in reasons))
    code = (f"# once, before training: stage the data locally (or in /dev/shm if it fits in RAM)\n"
            f"shutil.copytree({probe.path!r}, {LOCAL_COPY!r}, dirs_exist_ok=True)\n"
            f"dataset = MyDataset({LOCAL_COPY!r})  # or pack the files into WebDataset/LMDB shards")
    return Finding(
        severity="warning" if waiting else "info",
        title=title,
        message=message,
        evidence=evidence,
        remedy=Remedy(text="Stage the dataset on local NVMe or in RAM before training, or pack small files into "
                      "large shards read sequentially (WebDataset, LMDB, Parquet); keep more reads in flight "
                      "with more workers and a larger prefetch_factor.", code=code),
        prediction=prediction if waiting else None,
    )


def _evidence(session: Session, probe: StorageProbe, network: bool, found: InputStall | None) -> dict[str, Evidence]:
    """Where the dataset sits, what the read probe measured, and the loader's wait."""
    evidence: dict[str, Evidence] = {
        "path": Evidence(probe.path, None, None, "dataset location"),
        "network": Evidence(network, None, None, "network or remote filesystem"),
    }
    if probe.mount_point:
        evidence["mount_point"] = Evidence(probe.mount_point, None, None, "mount point")
    if probe.fs_type:
        evidence["fs_type"] = Evidence(probe.fs_type, None, None, "filesystem type")
    if probe.device:
        evidence["device"] = Evidence(probe.device, None, None, "device")
    probe_window = f"read probe, {probe.files_read} files, {probe.bytes_read} bytes"
    if probe.read_latency_p50_ms is not None:
        evidence["read_latency_p50"] = Evidence(round(probe.read_latency_p50_ms, 3), "ms", probe_window,
                                                "read latency (median)")
    if probe.read_latency_p95_ms is not None:
        evidence["read_latency_p95"] = Evidence(round(probe.read_latency_p95_ms, 3), "ms", probe_window,
                                                "read latency (p95)")
    if probe.throughput_mb_s is not None:
        evidence["throughput"] = Evidence(round(probe.throughput_mb_s, 1), "MB/s", probe_window, "read throughput")
    if probe.direct_io is not None:
        evidence["page_cache_bypassed"] = Evidence(probe.direct_io, None, probe_window, "page cache bypassed")
    if probe.rotational is not None:
        evidence["rotational_hint"] = Evidence(probe.rotational, None, None, "kernel rotational flag (a hint only)")
    iowait = metrics.mean([c.iowait_percent for c in metrics.cpu_samples_steady(session)
                           if c.iowait_percent is not None])
    if iowait is not None:
        evidence["iowait"] = Evidence(round(iowait, 1), "%", found.window if found else "whole run",
                                      "CPU time waiting on I/O (mean)")
    if found is not None:
        evidence["data_wait_share"] = Evidence(round(found.share * 100, 1), "%", found.window, "data wait / step time")
        evidence["stall_kind"] = Evidence(found.stall.kind, None, "whole run", "why batches are late (GD102)")
    return evidence


def _wait_text(found: InputStall | None, prediction: Prediction | None, waiting: bool) -> str:
    """The sentence on the loader's wait: whether storage costs the GPU time."""
    if waiting and found is not None and prediction is not None:
        return (f"The loop waited for data {found.share:.0%} of each step and the loader mostly waits "
                f"({found.stall.reason}): storage is the likely bottleneck. Without the wait: "
                f"{prediction.sentence()}.")
    if found is not None and found.significant and found.stall.kind == "waiting":
        return (f"The loop waited for data {found.share:.0%} of each step, but queued GPU work hid the wait "
                "(see GD102), so storage costs no GPU time for now.")
    if found is not None and found.significant:
        return (f"The loop waited for data {found.share:.0%} of each step, but the stall is {found.stall.kind}, "
                "so storage is not its main cause.")
    if found is not None:
        return "The loader hides it for now (data wait below 5% of the step)."
    return "Whether the loader waits on it was not measured."
