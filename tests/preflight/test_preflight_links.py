"""PF3xx: PCIe links (idle downshift), NUMA placement from a fake sysfs, GPU topology."""

from __future__ import annotations

import os

import pynvml
import pytest
from preflight_helpers import idle_gpu, sysfs

from gpudoctor.preflight import links


def test_full_links_pass(make_ctx) -> None:
    ctx = make_ctx()
    assert links.pcie_width(ctx).status == "pass"
    assert links.pcie_generation(ctx).found == "GPU 0: Gen5 of Gen5"


def test_a_lower_generation_at_idle_is_not_a_pass_and_not_a_fault(make_ctx) -> None:
    result = links.pcie_generation(make_ctx([idle_gpu(pcie_gen=1)]))
    assert result.status == "not-checked"
    assert "links downshift at idle" in (result.reason or "")


def test_a_lower_generation_under_load_fails(make_ctx) -> None:
    busy = idle_gpu(pcie_gen=3, util_gpu=95, reasons=0x0, pstate=0)
    assert links.pcie_generation(make_ctx([busy])).status == "fail"


def test_a_slot_slower_than_the_card_warns(make_ctx) -> None:
    result = links.pcie_generation(make_ctx([idle_gpu(pcie_gen=4, pcie_gen_max=4, pcie_gen_gpu_max=5)]))
    assert result.status == "warn" and "the slot limits the Gen5 card to Gen4" in result.found


def test_width(make_ctx) -> None:
    assert links.pcie_width(make_ctx([idle_gpu(pcie_width=8)])).status == "warn"  # idle: maybe narrowed
    busy = idle_gpu(pcie_width=8, util_gpu=80, reasons=0, pstate=0)
    result = links.pcie_width(make_ctx([busy]))
    assert result.status == "fail" and result.found == "GPU 0: x8 of x16"


def _affinity(monkeypatch, cpus: set[int]) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cpus)


def test_numa_remote_only_fails_local_passes(make_ctx, tmp_path, monkeypatch) -> None:
    root = sysfs(tmp_path / "s", gpus={"0000:18:00.0": 1}, nodes={0: "0-3", 1: "4-7"})
    _affinity(monkeypatch, {0, 1, 2, 3})
    remote = links.numa_affinity(make_ctx(sys_root=root))
    assert remote.status == "fail" and "NUMA node 1" in remote.found
    _affinity(monkeypatch, set(range(8)))
    both = links.numa_affinity(make_ctx(sys_root=root))
    assert both.status == "pass" and "4 on other nodes" in both.found


def test_numa_single_node_and_unknown_node(make_ctx, tmp_path, monkeypatch) -> None:
    _affinity(monkeypatch, {0, 1})
    single = links.numa_affinity(make_ctx(sys_root=sysfs(tmp_path / "a", nodes={0: "0-1"})))
    assert single.status == "pass" and "one NUMA node" in single.found
    unknown = sysfs(tmp_path / "b", gpus={"0000:18:00.0": -1}, nodes={0: "0", 1: "1"})
    result = links.numa_affinity(make_ctx([idle_gpu(numa_node=None)], sys_root=unknown))
    assert result.status == "not-checked" and "no NUMA node" in (result.reason or "")


def test_topology_needs_two_gpus(make_ctx) -> None:
    assert links.gpu_topology(make_ctx()).status == "not-checked"


def test_topology_nvlink_up_down_and_pcie_across_sockets(make_ctx) -> None:
    up = [idle_gpu(0, nvlinks=[1] * 18), idle_gpu(1, nvlinks=[1] * 18)]
    assert links.gpu_topology(make_ctx(up)).found == "NVLink: 18 active links per GPU on all 2 GPUs"
    down = [idle_gpu(0, nvlinks=[1] * 18), idle_gpu(1, nvlinks=[1] * 17 + [0])]
    result = links.gpu_topology(make_ctx(down))
    assert result.status == "warn" and "GPU 1: 17 active" in result.found
    pcie = [idle_gpu(0), idle_gpu(1)]
    far = links.gpu_topology(make_ctx(pcie, nvml_kwargs={"topology": {(0, 1): pynvml.NVML_TOPOLOGY_SYSTEM}}))
    assert far.status == "warn" and "across CPU sockets" in far.found
    assert links.gpu_topology(make_ctx(pcie)).status == "pass"


@pytest.mark.parametrize("text, cpus", [("0-3,8-11", {0, 1, 2, 3, 8, 9, 10, 11}), ("5", {5}), ("", set())])
def test_cpulist(text: str, cpus: set[int]) -> None:
    assert links._cpulist(text) == cpus


def test_the_link_seen_under_load_during_the_job_decides(make_ctx) -> None:
    from gpudoctor.preflight.link_watch import LinkUnderLoad

    ctx = make_ctx([idle_gpu(pcie_gen=1, pcie_width=16)])
    ctx.links_under_load = {0: LinkUnderLoad(busy_samples=12, max_generation=5, max_width=16, max_utilization=99)}
    result = links.pcie_generation(ctx)
    assert result.status == "pass" and result.found.startswith("GPU 0: Gen1 at idle; Gen5 of Gen5 under load")
    ctx.links_under_load = {0: LinkUnderLoad(busy_samples=12, max_generation=3, max_width=16, max_utilization=99)}
    assert links.pcie_generation(ctx).status == "fail"


def test_link_watcher_keeps_the_best_link_while_busy() -> None:
    import time

    from preflight_helpers import FakeNvml

    from gpudoctor.preflight.link_watch import LinkWatcher

    busy, idle = idle_gpu(0, util_gpu=90, pcie_gen=5), idle_gpu(1, util_gpu=0, pcie_gen=1)
    nv = FakeNvml([busy, idle])
    watcher = LinkWatcher([0, 1], nv=nv, interval_s=0.02).start()
    give_up = time.monotonic() + 120  # a hang guard: the samples are counted, not timed
    while (watcher.seen.get(0) is None or watcher.seen[0].busy_samples < 2) and time.monotonic() < give_up:
        time.sleep(0.01)
    seen = watcher.stop()
    assert list(seen) == [0] and seen[0].max_generation == 5 and seen[0].busy_samples >= 2
    assert nv.initialized == 0  # NVML released
