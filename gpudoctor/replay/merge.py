"""Helper threads folded into the thread that waited for them (autograd's worker in backward)."""

from __future__ import annotations

import bisect
from collections import defaultdict

from gpudoctor.replay.items import CPU, DISPATCH, PYTHON, SLACK_US, HostColumns, HostItem

HELPER_IDLE_US = 50.0  # a helper thread's time outside any operator longer than this is idle, not work


def fold_helpers(per_thread: list[HostColumns], launches: list[int], main: int) -> None:
    """Each other thread that launched GPU work folded into the main thread (_merge_helper), in
    thread order; `per_thread` is edited."""
    helpers = [n for n, launched in enumerate(launches) if n != main and launched]
    if not helpers:
        return
    main_items = per_thread[main].items()
    for number in helpers:
        per_thread[number] = HostColumns.of(_merge_helper(main_items, per_thread[number].items(), main))
    per_thread[main] = HostColumns.of(main_items)


def _merge_helper(main_items: list[HostItem], helper: list[HostItem], main: int) -> list[HostItem]:
    """Fold a helper thread's bursts into the main thread where the main thread waited for them.

    PyTorch runs CUDA backward passes on an autograd worker thread while the thread that
    called ``backward()`` blocks. That is one thread of control: the worker's burst of
    operators and launches stands in for the caller's wait, and the worker's long idle
    stretches between bursts are not work. A burst during which the main thread itself
    launched or blocked on the GPU is real concurrency and stays on its own thread.
    Returns what is left of the helper (its concurrent bursts); `main_items` is edited.
    """
    bursts: list[list[HostItem]] = [[]]
    for item in helper:
        idle = item.kind == CPU and item.tag == PYTHON and not item.api and item.dur >= HELPER_IDLE_US
        if idle:
            if bursts[-1]:
                bursts.append([])
        else:
            bursts[-1].append(item)
    kept: list[HostItem] = []
    # where the main thread's stacks show the model's calls, each folded burst is a call of its own
    # (a compiled model's backward is one compiled call too): numbered after the main thread's
    next_call = max((it.call for it in main_items), default=-1) + 1
    main_items.sort(key=lambda it: it.ts)
    starts = [it.ts for it in main_items]  # one thread's items follow each other: no two overlap
    cuts: dict[int, list[tuple[float, float]]] = defaultdict(list)  # main item -> burst spans inside it
    added: list[HostItem] = []
    for burst in (b for b in bursts if b):
        start, end = burst[0].ts, burst[-1].ts + burst[-1].dur
        lo = max(0, bisect.bisect_right(starts, start) - 1)
        hi = bisect.bisect_left(starts, end)
        overlapping = [k for k in range(lo, hi) if main_items[k].ts + main_items[k].dur > start]
        # the main thread's own work within the burst (beyond the clocks' few us of disagreement)
        busy = [k for k in overlapping if (main_items[k].kind != CPU or main_items[k].tag == DISPATCH)
                and min(end, main_items[k].ts + main_items[k].dur) - max(start, main_items[k].ts) > SLACK_US]
        if busy:
            kept.extend(burst)  # the main thread was busy meanwhile: truly concurrent
            continue
        for k in overlapping:  # the main thread waited: cut its wait out
            cuts[k].append((start, end))
        for it in burst:
            it.thread = main
            it.engine = True
            if next_call:  # (a helper's own module calls are numbered on its thread: the burst is one call)
                it.call = next_call
            added.append(it)
        next_call += bool(next_call)
    for k, spans in cuts.items():
        it, at = main_items[k], main_items[k].ts
        for start, end in [*sorted(spans), (it.ts + it.dur, it.ts + it.dur)]:
            if start > at:
                added.append(HostItem(CPU, main, at, start - at, tag=it.tag, optimizer=it.optimizer, fused=it.fused,
                                      call=it.call))
            at = max(at, end)
    if cuts or added:
        main_items[:] = sorted([it for k, it in enumerate(main_items) if k not in cuts] + added,
                               key=lambda it: it.ts)
    return kept
