"""The what-ifs as edits of a replay Plan: each changes a copy of the measured plan and says
how many items or operations it changed, and how (see replay.scenarios for what each means).

What an edit reads of the timeline whatever the plan (which items are DataLoader waits,
syncs, small copies, which items a captured graph could replace) is found once per timeline
(`Facts`, kept in timeline.cache) and shared by the scenarios and their pairs. Chains of
launches are found for all items at once; the edits that depend on the order of the items
(small copies stacked per run) walk only the items that take part.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from gpudoctor.collectors.kineto_names import library_kernel
from gpudoctor.replay import rates
from gpudoctor.replay.items import BLOCKING_COPY, CPU, DATA, DISPATCH, LAUNCH, PYTHON, SYNC, USER, GpuOp
from gpudoctor.replay.simulate import Plan
from gpudoctor.replay.timeline import Timeline

SMALL_COPY_BYTES = 64 * 1024  # Nsight Systems' line for small synchronous copies
GLUE_MAX_US = 100.0  # without Python stacks: shorter Python between launches is glue a compiler removes
# how an item takes part in a chain of launches: never, always, or when its own cost is short
NEVER, ALWAYS, IF_SHORT = 0, 1, 2
# how an item takes part in a run of small copies (GLUE: the framework's Python, in a trace with Python stacks)
SMALL, BETWEEN, NEUTRAL, ENDS, KERNEL, GLUE = 0, 1, 2, 3, 4, 5


@dataclass
class Facts:
    """What the edits read of one timeline."""

    data: list[int]  # DataLoader waits
    syncs: list[int]  # the workload's blocking calls: syncs, and copies that waited for a device-to-host copy
    chain: np.ndarray  # per item: NEVER | ALWAYS | IF_SHORT
    optimizer: np.ndarray  # per item: inside optimizer.step()
    fused: np.ndarray  # per item: what a fused optimizer replaces (items.HostItem.fused)
    calls: np.ndarray  # per item: its thread's outermost nn.Module call, -1 outside one (items.HostItem.call)
    threads: list[np.ndarray]  # the items of each thread, in order
    kinds: np.ndarray
    op_items: np.ndarray  # the item of each (item, operation) pair, by item
    op_ids: np.ndarray  # the operation of each pair
    pageable: list[tuple[int, list[int], bool]]  # items with big pageable copies: (item, copies, a launch?)
    own_syncs: list[int]  # per item of `pageable`: its copy operator's own stream sync, -1 for none
    kernel_launches: list[int]  # launch calls of kernels only
    copy_runs: list[tuple[int, int, int]]  # (item, thread, SMALL | BETWEEN | GLUE | KERNEL | ENDS), NEUTRAL left out
    copy_rates: dict[str, float]  # bytes/us of this trace's host-to-device copies of 64 KiB or more, by kind
    pinned_rate: float | None
    pinned_source: str
    fp32: list[int]  # fp32 GEMM kernels

    @classmethod
    def of(cls, timeline: Timeline) -> Facts:
        host, ops = timeline.host, timeline.ops
        count = len(host)
        kinds = np.array(host.kind, dtype=np.int64)
        thread = np.array(host.thread, dtype=np.int64)
        tag_codes = {DATA: 0, DISPATCH: 1, PYTHON: 2, USER: 3}
        tags = np.array([tag_codes.get(tag, 4) for tag in host.tag], dtype=np.int64)
        agent = np.array(host.agent, dtype=bool)
        op_items = np.repeat(np.arange(count), [len(queued) for queued in host.ops])
        op_ids = np.array([j for queued in host.ops for j in queued], dtype=np.int64)
        per_op = _OpFacts(ops)
        has_ops = np.bincount(op_items, minlength=count) > 0

        def every(flags: np.ndarray) -> np.ndarray:  # items with operations, all of them flagged
            alone: np.ndarray = has_ops & (np.bincount(op_items, weights=~flags[op_ids], minlength=count) == 0)
            return alone

        def some(flags: np.ndarray) -> np.ndarray:
            return np.bincount(op_items, weights=flags[op_ids], minlength=count) > 0

        cpu = kinds == CPU
        read_back = ~agent & ((kinds == SYNC) | ((kinds == BLOCKING_COPY) & some(per_op.device_to_host)))
        chain = np.where(kinds == LAUNCH, np.where(some(per_op.pageable), NEVER, ALWAYS),
                         np.where(~cpu, NEVER, np.select(
                             [tags == 1, tags == 2, tags == 3], [ALWAYS, ALWAYS if timeline.stacks else IF_SHORT,
                                                                  IF_SHORT], NEVER)))
        kernel_launch = (kinds == LAUNCH) & every(per_op.kernel)
        role = np.select([np.isin(kinds, (LAUNCH, BLOCKING_COPY)) & every(per_op.small_to_device),
                          (cpu & (tags == 1)) | ((kinds == SYNC) & ~agent), kernel_launch,
                          cpu & (tags == 2) & timeline.stacks, cpu & ((tags == 2) | (tags == 3))],
                         [SMALL, BETWEEN, KERNEL, GLUE, NEUTRAL], ENDS)
        runs = np.flatnonzero(role != NEUTRAL)
        big = per_op.big_pageable[op_ids]
        pageable: dict[int, list[int]] = {}
        for i, j in zip(op_items[big].tolist(), op_ids[big].tolist()):
            pageable.setdefault(i, []).append(j)
        rate, source = _pinned_rate(timeline)
        threads = [np.flatnonzero(thread == t) for t in dict.fromkeys(thread.tolist())]
        return cls(
            data=np.flatnonzero(cpu & (tags == 0)).tolist(),
            syncs=np.flatnonzero(read_back).tolist(),
            chain=chain.astype(np.int8),
            optimizer=np.array(host.optimizer, dtype=bool),
            fused=np.array(host.fused, dtype=bool),
            calls=np.array(host.call, dtype=np.int64),
            threads=threads,
            kinds=kinds, op_items=op_items, op_ids=op_ids,
            pageable=[(i, found, bool(kinds[i] == LAUNCH)) for i, found in pageable.items()],
            own_syncs=_own_syncs(timeline, threads, list(pageable)),
            kernel_launches=np.flatnonzero(kernel_launch).tolist(),
            copy_runs=list(zip(runs.tolist(), thread[runs].tolist(), role[runs].tolist())),
            copy_rates=_copy_rates(ops), pinned_rate=rate, pinned_source=source,
            fp32=[j for j, op in enumerate(ops) if op.gemm == "fp32"],
        )


class _OpFacts:
    """Per GPU operation, what the edits ask of it."""

    def __init__(self, ops: list[GpuOp]) -> None:
        copies = [op.copy or "" for op in ops]
        nbytes = np.array([op.nbytes for op in ops], dtype=np.float64)
        self.kernel = np.array([op.kind == "k" for op in ops], dtype=bool)
        self.device_to_host = np.array([c.startswith("DtoH") for c in copies], dtype=bool)
        self.pageable = np.array([c.startswith("HtoD_pageable") for c in copies], dtype=bool)
        self.big_pageable = np.array([c == "HtoD_pageable" for c in copies], dtype=bool) & (nbytes >= SMALL_COPY_BYTES)
        self.small_to_device = np.array([op.kind == "c" and c.startswith("HtoD") for op, c in zip(ops, copies)],
                                        dtype=bool) & (nbytes < SMALL_COPY_BYTES)


def facts(timeline: Timeline) -> Facts:
    found = timeline.cache.get("facts")
    if not isinstance(found, Facts):
        found = timeline.cache["facts"] = Facts.of(timeline)
    return found


def _copy_rates(ops: list[GpuOp]) -> dict[str, float]:
    """Bytes per us of the host-to-device copies of 64 KiB or more, by kind (HtoD_pageable, ...)."""
    moved: dict[str, list[float]] = {}
    for op in ops:
        if op.copy and op.copy.startswith("HtoD") and op.nbytes >= SMALL_COPY_BYTES and op.dur > 0:
            totals = moved.setdefault(op.copy, [0.0, 0.0])
            totals[0] += op.nbytes
            totals[1] += op.dur
    return {kind: nbytes / us for kind, (nbytes, us) in moved.items()}


def _own_syncs(timeline: Timeline, threads: list[np.ndarray], copies: list[int]) -> list[int]:
    """For each copy call in `copies`, the stream synchronisation its own operator made after it, -1
    for none: ``.to(device)`` (``non_blocking=False``) copies, then waits for the copy's stream
    before it returns (``cudaStreamSynchronize`` inside ``aten::copy_``). It is the next blocking call
    on the copy's thread with only that operator's dispatch between the two, on the copy's stream (or
    every stream), and not one that reads a value back. ``non_blocking=True`` makes no such call."""
    host, ops = timeline.host, timeline.ops
    position = {int(i): (n, k) for n, mine in enumerate(threads) for k, i in enumerate(mine.tolist())}
    found = []
    for i in copies:
        n, k = position[i]
        mine = threads[n]
        streams = {ops[j].stream for j in host.ops[i]}
        own = -1
        for later in mine[k + 1:].tolist():
            if host.kind[later] == CPU and host.tag[later] == DISPATCH:
                continue
            if (host.kind[later] == SYNC and not host.agent[later] and host.read[later] is None
                    and (host.scope[later] is None or host.scope[later] in streams)):
                own = later
            break
        found.append(own)
    return found


def _pinned_rate(timeline: Timeline) -> tuple[float | None, str]:
    """Bytes per us of this trace's own pinned host-to-device copies, when it has some."""
    nbytes = us = 0.0
    for op in timeline.ops:
        if op.copy == "HtoD_pinned" and op.nbytes >= SMALL_COPY_BYTES:
            nbytes, us = nbytes + op.nbytes, us + op.dur
    if us > 0 and nbytes > 0:
        return nbytes / us, f"at the pinned rate measured in this trace, {nbytes / us / 1e3:.1f} GB/s"
    return None, f"at {rates.PINNED_BYTES_PER_US / 1e3:.1f} GB/s, the pinned rate {rates.PINNED_SOURCE}"


def _launch_cost(timeline: Timeline, plan: Plan) -> float:
    costs = [plan.cost[i] for i in facts(timeline).kernel_launches]
    return statistics.median(costs) if costs else 5.0


# ---- the edits: each changes a copy of the measured plan; returns (items/ops changed, detail) ----

def data(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    changed = 0
    for i in facts(timeline).data:
        if plan.cost[i] > 0:
            plan.cost[i] = 0.0
            changed += 1
    return changed, "DataLoader waits (time in __next__ on the host) removed"


def sync(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """The workload's syncs stop blocking. The operator around a read-back (``.item()``, ``.cpu()``
    of a result) keeps its host cost: the remedy keeps the value on the GPU, where one operator
    still has to consume it (``running += loss.detach()``), and dispatching that costs the host
    about what dispatching the read did (measured on an H200: ``aten::item`` 17 us traced, of which
    the sync 7 us, against ``aten::add_`` 10.4 us and ``aten::detach`` 1.9 us in the remedied run
    of tests/workloads/gpu/item_per_layer.py). The host time around the read is not the read's
    either: the next operator's dispatch shares its gap."""
    changed = 0
    host = timeline.host
    for i in facts(timeline).syncs:
        if plan.blocks[i]:
            plan.blocks[i] = False
            plan.cost[i] = min(host.dur[i], host.post[i]) if host.waited[i] else host.dur[i]
            changed += 1
    return changed, ("synchronisations no longer block the host; the operators that read a value back keep "
                     "their host cost: the values stay on the GPU, where an operator still consumes them")


def launch(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """The model's launch chains as graphs (what torch.compile(mode="reduce-overhead") buys): each
    chain costs the host one compiled call, whose graph starts once the call's host work is done. The
    kernels run as measured: a host-side what-if (what fusion saves on the GPU is `compiled`'s)."""
    changed, chains = _collapse(timeline, plan, optimizer=False, graph_call=True)
    glue = ("framework Python removed, the user's own Python kept" if timeline.stacks
            else f"Python stretches under {GLUE_MAX_US:.0f} us removed")
    calls = ("one per call of the model (its outermost nn.Module calls in the trace's stacks; what runs "
             "outside them as measured)" if bool((facts(timeline).calls >= 0).any()) else "")
    return changed, (f"{chains:,} launch chains outside optimizer.step(){' (' + calls + ')' if calls else ''} issued "
                     f"as one graph each: the host cost of one compiled call ({rates.GRAPH_CALL_SOURCE}), {glue}; "
                     f"{rates.GRAPH_SOURCE}")


def compiled(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """The model compiled without CUDA graphs (torch.compile's default mode): each launch chain the launch
    what-if takes as one graph is instead one compiled call that still launches kernel by kernel. Its
    framework Python goes; a run of kernels that are not matrix multiplies or convolutions (elementwise,
    norms, reductions: what Inductor fuses) is launched as one kernel, each matrix multiply or
    convolution as its own (Inductor calls them as extern kernels); each launch costs the host what a
    compiled kernel does, and each call what a compiled call costs beyond an eager one (rates.COMPILED_*:
    a training step's forward, its backward, or a forward without one). The backward that autograd's
    engine runs is a chain of its own at the backward's costs (the backward functions of what the script
    ran outside the model's calls, a loss's, are in no chain: as measured). On the GPU, a fused run is one pass over
    memory: it takes as long as its longest member took (a run of memory-bound elementwise kernels moves
    its tensors once instead of once per kernel); matrix multiplies, convolutions and copies run as
    measured."""
    known = facts(timeline)
    members, chain_of = _chains(timeline, plan, optimizer=False)
    if not len(members):
        return 0, "no launch chain to compile"
    engine = np.array(timeline.host.engine, dtype=bool)
    # a forward whose backward the window holds is a training step's: its compiled call costs more
    forward = rates.COMPILED_FORWARD if engine.any() else rates.COMPILED_INFERENCE
    # a chain also ends where the engine's folded backward starts or stops (without Python stacks the
    # forward and the backward are not told apart by module calls)
    split = np.concatenate(([False], (chain_of[1:] == chain_of[:-1]) & (engine[members[1:]] != engine[members[:-1]])))
    chain_of = np.cumsum(np.concatenate(([True], chain_of[1:] != chain_of[:-1])) | split) - 1
    fusable = _fusable_launches(timeline)
    cost = np.array(plan.cost, dtype=np.float64)
    changed = chains = kept_launches = launched = 0
    before = float(np.sum(plan.dur))
    bounds = np.flatnonzero(np.concatenate(([True], chain_of[1:] != chain_of[:-1], [True])))
    for low, high in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        items = members[low:high]
        launches = items[known.kinds[items] == LAUNCH]
        if len(launches) < 2:
            continue
        costs = rates.COMPILED_BACKWARD if engine[items[0]] else forward
        issued = _fuse(timeline, plan, items, fusable)
        for i in items.tolist():
            if known.kinds[i] == LAUNCH:
                plan.cost[i] = costs.kernel_us if issued[i] else 0.0
                kept_launches += issued[i]
                launched += 1
            elif cost[i] > 0:
                plan.cost[i] = 0.0
                changed += 1
        plan.cost[int(launches[0])] += costs.call_us
        changed += len(launches)
        chains += 1
    if not chains:
        return 0, "no launch chain to compile"
    saved = before - float(np.sum(plan.dur))
    return changed, (f"{chains:,} launch chains outside optimizer.step() as compiled calls without CUDA graphs: "
                     f"{launched:,} launches issued as {kept_launches:,} (each run of fusable kernels as one, "
                     f"matrix multiplies and convolutions on their own), at {rates.COMPILED_SOURCE}; framework "
                     f"Python removed; each run of fusable kernels as long as its longest kernel "
                     f"({saved / 1e3:,.1f} ms of GPU time less)")


def _fusable_launches(timeline: Timeline) -> np.ndarray:
    """Per host item: it launched kernels Inductor generates and fuses. Not a copy's or a memset's launch;
    not one of a matrix multiply, convolution or attention kernel (what Inductor calls as an extern
    kernel); not one of a kernel Inductor already generated (``triton_*``: the model is compiled), nor
    a CUDA graph's replay."""
    known = facts(timeline)
    kernels_only = np.zeros(len(timeline.host), dtype=bool)
    kernels_only[known.kernel_launches] = True
    kept_apart = np.array([op.kind == "k" and (op.gemm is not None or library_kernel(op.name)
                                               or op.name.startswith("triton_")) for op in timeline.ops], dtype=bool)
    unfusable = np.bincount(known.op_items, weights=kept_apart[known.op_ids], minlength=len(timeline.host)) > 0
    graphs = np.array(["GraphLaunch" in api for api in timeline.host.api], dtype=bool)
    fusable: np.ndarray = kernels_only & ~unfusable & ~graphs
    return fusable


def _fuse(timeline: Timeline, plan: Plan, items: np.ndarray, fusable: np.ndarray) -> dict[int, bool]:
    """A chain's runs of fusable launches (`items`, in order; what comes between launches does not
    break a run) as one kernel each: on the GPU as long as its longest member (one pass over memory),
    the others of the run nothing. Whether each launch is still issued (a run's first, and every
    launch that is not fusable)."""
    known, queued = facts(timeline), timeline.host.ops
    issued: dict[int, bool] = {}
    previous_fused, head = False, -1  # head: the operation that carries the current run
    for i in items.tolist():
        if known.kinds[i] != LAUNCH:
            continue
        mine = bool(fusable[i])
        issued[i] = not (mine and previous_fused)  # a fusable kernel after another rides in its launch
        previous_fused = mine
        if mine and queued[i]:
            if issued[i] or head < 0:
                head = queued[i][0]
            for j in queued[i]:
                if j != head:
                    plan.dur[head] = max(plan.dur[head], plan.dur[j])
                    plan.dur[j], plan.gap[j] = 0.0, 0.0
    return issued


def optimizer(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """optimizer.step()'s update launches as one chain each (a fused or foreach optimizer's few kernels)."""
    changed, chains = _collapse(timeline, plan, optimizer=True)
    known = facts(timeline)  # the update function told apart from the rest of step() in some thread's stacks
    kept = ("; the rest of step() (its wrapper, hooks and _init_group's loop over the parameters) as measured"
            if bool((known.fused != known.optimizer).any()) else "")
    return changed, (f"{chains:,} optimizer steps' update launches issued back to back as one chain each (a fused "
                     f"or foreach optimizer's few multi-tensor kernels){kept}; {rates.GRAPH_SOURCE}")


def _chains(timeline: Timeline, plan: Plan, optimizer: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per thread, maximal runs of items a captured graph would replace: launches, their
    dispatch, and the Python between them (framework Python whatever its length when the
    trace tells it from the user's, else short stretches only); the user's own long Python,
    data waits and blocking calls end a chain. Where the thread's Python stacks show the model's
    calls (outermost ``nn.Module`` frames), each call is a chain of its own (a compiled model is
    one compiled call each time it is called) and what runs outside them stays as measured, the
    backward of what ran outside them included (HostItem.outside: a loss's); a chain also ends
    crossing into or out of
    optimizer.step() (`optimizer` picks which side is chained: outside the step, or what a fused
    optimizer replaces inside it, its update function where the trace shows it; the rest of the
    step is chained by neither). (The items of every chain, one chain after the other, in the
    order a walk over the items closes them; the chain of each.)"""
    known = facts(timeline)
    cost = np.array(plan.cost, dtype=np.float64)
    outside = np.array(timeline.host.outside, dtype=bool)
    joins = (known.fused if optimizer else ~known.optimizer) & (
        (known.chain == ALWAYS) | ((known.chain == IF_SHORT) & (cost < GLUE_MAX_US)))
    members, closed_at = [], []
    count = len(joins)
    for mine in known.threads:
        # the backward of what ran outside the model's calls (a loss) stays eager when the model is compiled,
        # on whichever thread autograd's engine ran it
        inside = joins[mine] if optimizer else joins[mine] & ~outside[mine]
        if not inside.any():
            continue
        call = known.calls[mine]
        if optimizer or not (call >= 0).any():
            call = np.zeros(len(mine), dtype=np.int64)  # no module calls traced here: the glue rules alone
        else:  # one compiled call per outermost module call: what runs outside the model stays eager
            inside = inside & (call >= 0)
        same = np.concatenate(([False], inside[1:] & inside[:-1] & (call[1:] == call[:-1])))
        opens = np.flatnonzero(inside & ~same)
        closes = np.flatnonzero(inside & ~np.append(same[1:], False)) + 1  # runs [open, close)
        for low, high in zip(opens.tolist(), closes.tolist()):
            members.append(mine[low:high])
            # closed by the thread's next item; one still open at the end, after every item
            closed_at.append(int(mine[high]) if high < len(mine) else count + int(mine[low]))
    if not members:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(np.array(closed_at), kind="stable")
    runs = [members[k] for k in order.tolist()]
    return np.concatenate(runs), np.repeat(np.arange(len(runs)), [len(run) for run in runs])


def _collapse(timeline: Timeline, plan: Plan, *, optimizer: bool, graph_call: bool = False) -> tuple[int, int]:
    """Each chain of two launches or more as one graph: its first launch issues every
    operation of the chain at the graph rate, the other items cost nothing. With `graph_call`
    the first launch costs the host a compiled graph's call (rates.graph_call_us of the chain's
    launches) and the graph starts after it; else one launch call, as measured (a fused
    optimizer's few kernels)."""
    known = facts(timeline)
    members, chain_of = _chains(timeline, plan, optimizer)
    is_launch = known.kinds[members] == LAUNCH
    launches = np.bincount(chain_of[is_launch], minlength=int(chain_of.max(initial=-1)) + 1)
    kept = launches[chain_of] >= 2 if len(members) else np.zeros(0, dtype=bool)
    if not kept.any():
        return 0, 0
    first_launch = np.full(len(launches), -1, dtype=np.int64)
    launch_rows = np.flatnonzero(is_launch)
    chains_with, first = np.unique(chain_of[launch_rows], return_index=True)
    first_launch[chains_with] = members[launch_rows[first]]
    head = first_launch[chain_of]
    cost = np.array(plan.cost, dtype=np.float64)
    dropped = members[kept & (members != head) & (cost[members] > 0)]
    for i in dropped.tolist():
        plan.cost[i] = 0.0
    # with graph_call, each chain's head costs the host a compiled call, and its graph starts after it
    after = np.zeros(len(timeline.host), dtype=np.float64)  # per chain head: the host time before its graph starts
    if graph_call:
        heads = first_launch[launches >= 2]
        for i, n in zip(heads.tolist(), launches[launches >= 2].tolist()):
            plan.cost[i] = after[i] = max(plan.cost[i], rates.graph_call_us(int(n)))
    # every operation of the chain's items issued by its head; the last chain to name one decides
    chain_rows = np.flatnonzero(kept)
    heads_of_item = np.full(len(timeline.host), -1, dtype=np.int64)
    position = np.full(len(timeline.host), -1, dtype=np.int64)
    heads_of_item[members[chain_rows]] = head[chain_rows]
    position[members[chain_rows]] = chain_rows
    pairs = np.flatnonzero(heads_of_item[known.op_items] >= 0)
    if len(pairs):
        by_order = pairs[np.lexsort((pairs, position[known.op_items[pairs]]))]  # chains in order, items in order
        ops = known.op_ids[by_order]
        _, last = np.unique(ops[::-1], return_index=True)
        winners = by_order[::-1][last]
        latency, graph_us = timeline.launch_latency_us, rates.GRAPH_KERNEL_US
        for j, at in zip(known.op_ids[winners].tolist(), heads_of_item[known.op_items[winners]].tolist()):
            plan.launch_at[j] = at
            plan.ready[j] = latency + after[at]
            plan.gap[j] = max(0.0, graph_us - plan.dur[j])
    return len(dropped), int((launches >= 2).sum())


def pinned(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """Big pageable host-to-device copies made pinned and asynchronous (``pin_memory=True``,
    ``.to(device, non_blocking=True)``). Per copy, from this trace: the call costs the host what a
    kernel launch costs it (the median launch call measured), not the staging through the driver's
    buffer its pageable call took; the copy is ready the measured launch latency after its call, not
    after the staging began; the stream synchronisation its operator made after it (a blocking
    ``.to()``) is no longer made, so the host goes on with the step while the copy runs. The copy's
    bytes move at the pinned rate this trace measured, else the link's (`rates`)."""
    known = facts(timeline)
    rate = known.pinned_rate or rates.PINNED_BYTES_PER_US
    changed = 0
    cost = _launch_cost(timeline, plan)
    latency = timeline.launch_latency_us
    for (i, big, is_launch), own_sync in zip(known.pageable, known.own_syncs):
        for j in big:
            op = timeline.ops[j]
            # the bytes at the pinned rate, never slower than the pageable copy measured: the pageable
            # rate varies with the host (staging through its memory), the pinned one is the link's
            plan.dur[j] = min(op.dur, op.nbytes / rate)
            plan.ready[j] = min(plan.ready[j], latency)
        plan.blocks[i] = False
        plan.cost[i] = min(plan.cost[i], cost) if is_launch else cost
        if own_sync >= 0:
            plan.blocks[own_sync], plan.cost[own_sync] = False, 0.0
        changed += 1
    return changed, ("pageable host-to-device copies of 64 KiB or more pinned and asynchronous "
                     f"({known.pinned_source}; each copy call's host cost a launch's and its copy ready a "
                     "launch's latency after it, as "
                     "measured in this trace; the stream synchronisation after each copy no longer made)")


def small_copies(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    """A burst of tiny host-to-device copies is launch and API cost: stacked on the host, one copy.

    Each tiny copy is a whole ``.to()`` call: its Python binding (the framework's Python around
    the operator), the operator's dispatch and allocation, the copy's API call and, from pageable
    memory, the stream synchronisation it makes, for a GPU copy of under a microsecond. Stacked,
    one such call remains, moving every byte.

    A run lasts from a thread's first small copy while only Python (the framework's or the
    user's own loop over the tensors), operator dispatch, syncs and at most one kernel (the
    one consuming the tensor just copied) come between two copies. The run's first copy is the
    stacked one: its call keeps its measured cost, it blocks as measured and so does its own
    sync (a copy from pageable memory still waits for the stream), its GPU copy carries every
    byte of the run (the extra bytes at the rate this trace measured for copies of its kind of
    64 KiB or more, else the link's pinned rate). Each later copy goes with its call: its API
    call, the dispatch and syncs between it and the copy before, and, where the trace has Python
    stacks, the framework's Python there (the per-tensor ``.to()`` binding); the user's own
    Python stays. Kernels stay, and the syncs before them no longer block (the stacked copy was
    made before them)."""
    known = facts(timeline)
    queued, ops, kinds = timeline.host.ops, timeline.ops, known.kinds
    changed = runs = 0
    head: dict[int, int] = {}  # thread -> the first small copy of its current run
    folded: dict[int, int] = {}  # thread -> copies folded into that one so far
    between: dict[int, list[int]] = {}  # dispatch items, syncs and framework Python since the last small copy
    consumed: dict[int, bool] = {}  # a kernel came since the last small copy
    own_sync: dict[int, bool] = {}  # the first copy's own sync (a pageable copy's) is still to come
    rate: dict[int, float] = {}  # thread -> bytes/us of its stacked copy's extra bytes
    for i, thread, role in known.copy_runs:  # the user's Python between copies (NEUTRAL) changes nothing
        if role == SMALL:
            consumed[thread] = False
            if thread not in head:
                head[thread], folded[thread], between[thread] = i, 0, []
                kind = ops[queued[i][0]].copy or ""
                own_sync[thread] = kind.endswith("_pageable")
                rate[thread] = known.copy_rates.get(kind) or known.pinned_rate or rates.PINNED_BYTES_PER_US
                continue
            first = head[thread]
            for j in queued[i]:  # carried by the run's first copy
                plan.dur[queued[first][0]] += ops[j].nbytes / rate[thread]
                plan.dur[j], plan.gap[j], plan.launch_at[j] = 0.0, 0.0, first
            plan.cost[i], plan.blocks[i] = 0.0, False
            for k in between[thread]:  # the per-tensor .to(): its binding, dispatch and stream sync go with it
                plan.cost[k], plan.blocks[k] = 0.0, False
            between[thread] = []
            own_sync[thread] = False
            changed += 1
            folded[thread] += 1
            if folded[thread] == 1:
                runs += 1
        elif thread not in head:
            continue
        elif role == BETWEEN and kinds[i] == SYNC and own_sync[thread]:
            own_sync[thread] = False  # the stacked copy's own sync: it stays, and waits for every byte
        elif role in (BETWEEN, GLUE):
            between[thread].append(i)
        elif role == KERNEL and not consumed.get(thread):
            # one kernel between two copies consumes the tensor just copied: it stays, with its
            # dispatch, and the copy's sync before it no longer blocks. A second one is the step's
            # own work: the run ends there (the next step's tensors do not exist yet)
            consumed[thread] = True
            own_sync[thread] = False
            for k in between[thread]:
                if kinds[k] == SYNC:
                    plan.cost[k], plan.blocks[k] = 0.0, False
            between[thread] = []
        else:
            del head[thread]
    return changed, (f"{changed:,} small host-to-device copies folded into {runs:,} stacked copies: each folded "
                     "copy's call (its API call, dispatch and sync" + (", the framework's Python around it"
                                                                       if timeline.stacks else "")
                     + ") removed; the stacked copy keeps the first one's call and sync and moves every byte")


def tf32(timeline: Timeline, plan: Plan) -> tuple[int, str]:
    changed = 0
    for j in facts(timeline).fp32:
        op = timeline.ops[j]
        plan.dur[j] = op.dur / rates.tf32_speedup(op.dur)
        changed += 1
    return changed, f"fp32 GEMM kernels at the TF32 rate ({rates.TF32_SOURCE})"
