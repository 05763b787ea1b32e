"""PF3xx: PCIe links, NUMA placement and GPU-to-GPU topology.

PCIe links downshift their generation (and on some platforms their width) while
the GPU idles, to save power; preflight runs with no workload, so a lower link
on an idle GPU is reported as such, not as a fault.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpudoctor.preflight.context import Context
from gpudoctor.preflight.gpu import Verdict, per_gpu
from gpudoctor.preflight.gpu_facts import GpuFacts
from gpudoctor.preflight.model import FAIL, NOT_CHECKED, PASS, WARN, ItemResult, Unread, not_checked

TOPOLOGY = {0: "same board", 10: "one PCIe switch", 20: "several PCIe switches", 30: "one host bridge",
            40: "one NUMA node (host bridges)", 50: "across CPU sockets"}
TOPOLOGY_SYSTEM = 50
IDLE_PSTATE = 8  # P8 and deeper: the idle performance states


def probe(ctx: Context) -> list[ItemResult]:
    return [judge(ctx) for _, judge in ITEMS]


def idle(g: GpuFacts) -> bool:
    """The GPU runs nothing now (utilization 0, or the Idle clock-event reason, or P8+)."""
    util, reasons, pstate = g.get("util"), g.get("clock_reasons"), g.get("pstate")
    return ((isinstance(util, int) and util == 0) or (isinstance(reasons, int) and bool(reasons & 0x1))
            or (isinstance(pstate, int) and pstate >= IDLE_PSTATE))


def _under_load(
    ctx: Context, g: GpuFacts, attribute: str, top: int, unit: str, values: dict[str, Any]
) -> Verdict | None:
    """The verdict from the link seen while the job kept this GPU busy, None when not seen."""
    seen = ctx.links_under_load.get(g.index)
    if seen is None:
        return None
    best = getattr(seen, attribute)
    values["under_load"] = best
    text = f"{unit.format(best)} of {unit.format(top)} under load (the job's run, {seen.busy_samples} busy samples)"
    return (PASS if best >= top else FAIL), text, values


def pcie_width(ctx: Context) -> ItemResult:
    def judge(g: GpuFacts) -> Verdict:
        cur, top = g.get("pcie_width"), g.get("pcie_width_max")
        if isinstance(cur, Unread) or isinstance(top, Unread):
            return NOT_CHECKED, (cur if isinstance(cur, Unread) else top).reason, {}
        values = {"width": cur, "width_max": top, "idle": idle(g)}
        text = f"x{cur} of x{top}"
        if cur >= top:
            return PASS, text, values
        loaded = _under_load(ctx, g, "max_width", top, "x{}", values) if idle(g) else None
        if loaded is not None:
            return loaded[0], f"{text} at idle; {loaded[1]}", loaded[2]
        if idle(g):
            return WARN, text + " while idle (some platforms narrow idle links: check under load)", values
        return FAIL, text, values

    return per_gpu(ctx, "PF301", "current width = the widest card and slot allow", judge)


def pcie_generation(ctx: Context) -> ItemResult:
    def judge(g: GpuFacts) -> Verdict:
        cur, top, card = g.get("pcie_gen"), g.get("pcie_gen_max"), g.get("pcie_gen_gpu_max")
        if isinstance(cur, Unread) or isinstance(top, Unread):
            return NOT_CHECKED, (cur if isinstance(cur, Unread) else top).reason, {}
        values: dict[str, Any] = {
            "generation": cur,
            "generation_max": top,
            "card_generation_max": card if isinstance(card, int) else None,
            "idle": idle(g),
        }
        slot = f"; the slot limits the Gen{card} card to Gen{top}" if isinstance(card, int) and card > top else ""
        text = f"Gen{cur} of Gen{top}" + slot
        loaded = _under_load(ctx, g, "max_generation", top, "Gen{}", values) if cur < top and idle(g) else None
        if loaded is not None:
            status = WARN if loaded[0] == PASS and slot else loaded[0]
            return status, f"Gen{cur} at idle; {loaded[1]}{slot}", loaded[2]
        if cur < top and idle(g):
            reason = (
                f"Gen{cur} of Gen{top} while the GPU idles: links downshift at idle, so the generation "
                "under load is unknown (`gpudoctor preflight -- COMMAND` reads it while the job runs)"
            )
            return NOT_CHECKED if not slot else WARN, reason + slot, values
        if cur < top:
            return FAIL, text + " under load", values
        return (WARN if slot else PASS), text, values

    return per_gpu(ctx, "PF302", "current generation = the highest card and slot allow", judge)


def _cpulist(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def numa_nodes(sys_root: Path) -> dict[int, set[int]]:
    nodes = {}
    for node in sorted((sys_root / "devices" / "system" / "node").glob("node[0-9]*")):
        try:
            nodes[int(node.name[4:])] = _cpulist((node / "cpulist").read_text())
        except (OSError, ValueError):
            continue
    return nodes


def _gpu_node(ctx: Context, g: GpuFacts) -> Any:
    bus = g.get("bus_id")
    if isinstance(bus, str):
        try:
            return int((ctx.sys_root / "bus" / "pci" / "devices" / bus / "numa_node").read_text().strip())
        except (OSError, ValueError):
            pass
    node = g.get("numa_node_nvml")
    return (
        node
        if isinstance(node, int)
        else Unread(f"no NUMA node for {bus if isinstance(bus, str) else 'the GPU'} in sysfs or NVML")
    )


def numa_affinity(ctx: Context) -> ItemResult:
    import os

    expected = "this process may run on CPUs of each GPU's NUMA node"
    try:
        allowed = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return not_checked("PF303", "the CPU affinity of this process cannot be read (not Linux)", expected)
    nodes = numa_nodes(ctx.sys_root)
    if not nodes:
        return not_checked("PF303", "no NUMA nodes in sysfs (not Linux?)", expected)
    if len(nodes) == 1:  # every CPU is local to every GPU
        cpus = len(next(iter(nodes.values())))
        return per_gpu(ctx, "PF303", expected, lambda g: (PASS, f"one NUMA node on this machine ({cpus} CPUs)", {}))

    def judge(g: GpuFacts) -> Verdict:
        node = _gpu_node(ctx, g)
        if isinstance(node, Unread):
            return NOT_CHECKED, node.reason, {}
        if node < 0 or node not in nodes:
            return NOT_CHECKED, f"the firmware reports no NUMA node for the GPU (numa_node {node})", {}
        local = nodes[node] & allowed
        values = {"numa_node": node, "local_cpus_allowed": len(local), "node_cpus": len(nodes[node])}
        if not local:
            return FAIL, f"NUMA node {node}; this process may run only on other nodes' CPUs", values
        remote = len(allowed - nodes[node])
        extra = f" and {remote} on other nodes (bind each rank to its GPU's node)" if remote else ""
        return PASS, f"NUMA node {node}: {len(local)} of its {len(nodes[node])} CPUs allowed{extra}", values

    return per_gpu(ctx, "PF303", expected, judge)


def gpu_topology(ctx: Context) -> ItemResult:
    expected = "NVLink between the GPUs with every link up, or PCIe paths within one CPU socket"
    if ctx.nvml.error:
        return not_checked("PF304", ctx.nvml.error, expected)
    gpus = ctx.visible
    if len(gpus) < 2:
        return not_checked("PF304", f"{len(gpus) or 'no'} GPU visible: no GPU-to-GPU path to check", expected)
    links = {g.index: g.get("nvlinks") for g in gpus}
    with_nvlink = {i: v for i, v in links.items() if isinstance(v, tuple) and v[0] > 0}
    values: dict[str, Any] = {"nvlink_active": {str(i): v[0] for i, v in with_nvlink.items()}}
    if with_nvlink:
        return _nvlink_links(links, with_nvlink, len(gpus), expected, values)
    return _pcie_paths(ctx, {g.index for g in gpus}, expected, values)


def _nvlink_links(links: dict[int, Any], with_nvlink: dict[int, Any], count: int, expected: str,
                  values: dict[str, Any]) -> ItemResult:
    """GPUs joined by NVLink: every one should have as many active links as the best."""
    most = max(v[0] for v in with_nvlink.values())
    down = {i: v for i, v in links.items() if not (isinstance(v, tuple) and v[0] == most)}
    found = f"NVLink: {most} active links per GPU"
    if down:
        text = "; ".join(f"GPU {i}: {v[0] if isinstance(v, tuple) else 0} active" for i, v in down.items())
        return ItemResult("PF304", WARN, f"{found} on most GPUs; {text}", expected, values=values)
    return ItemResult("PF304", PASS, f"{found} on all {count} GPUs", expected, values=values)


def _pcie_paths(ctx: Context, indices: set[int], expected: str, values: dict[str, Any]) -> ItemResult:
    """GPUs without NVLink: no pair's PCIe path should cross the CPU sockets' interconnect."""
    pairs = {k: v for k, v in ctx.nvml.topology.items() if k[0] in indices and k[1] in indices}
    unread = [v for v in pairs.values() if isinstance(v, Unread)]
    if not pairs or unread:
        return not_checked("PF304", unread[0].reason if unread else "no GPU pair topology read", expected)
    values["pairs"] = {f"{a}-{b}": int(v) for (a, b), v in pairs.items()}
    far = [f"{a}-{b}" for (a, b), v in pairs.items() if int(v) >= TOPOLOGY_SYSTEM]
    worst_level = max(int(v) for v in pairs.values())
    found = f"no NVLink; PCIe, worst pair: {TOPOLOGY.get(worst_level, worst_level)}"
    if far:
        return ItemResult("PF304", WARN, f"{found} (GPU pairs {', '.join(far[:6])})", expected, values=values)
    return ItemResult("PF304", PASS, found, expected, values=values)


# (item ID, judge): the order of the checklist
ITEMS = (
    ("PF301", pcie_width),
    ("PF302", pcie_generation),
    ("PF303", numa_affinity),
    ("PF304", gpu_topology),
)
