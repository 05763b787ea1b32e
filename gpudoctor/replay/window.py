"""The part of a long profiled window that the replay models.

A replay walks every host item and GPU operation, once per what-if: its cost grows with
the window while its answer, the ratio of a step's time with and without a cause, does
not (a window repeats its steps). A window of more than REPLAY_MAX_EVENTS events is
replayed over its latest stretch of at most that many, begun at a step boundary where one
falls inside it (collectors.window_picture.step_boundaries): a stretch cut inside a step would begin with GPU work
whose launches it lacks. Every committed recorded window (at most 137,000 events) is
replayed whole; the part replayed is named in ReplaySummary.scope and the predictions.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.collectors.kineto_names import STEP_PREFIX
from gpudoctor.collectors.trace_decode import TraceIndex
from gpudoctor.collectors.window_picture import step_boundaries

REPLAY_MAX_EVENTS = 150_000
SAMPLE = 8


def latest_stretch(index: TraceIndex, steps: int, budget: int = REPLAY_MAX_EVENTS) -> tuple[TraceIndex, int, str]:
    """(the events to replay, the steps they cover, "" or what part of the window that is)."""
    if index.part is not None:  # already the part to replay
        return index, *index.part
    groups = index.groups()
    total = sum(len(group) for group in groups.values())
    if total <= budget:
        return index, steps, ""
    # the budget-th latest start, estimated from every SAMPLE-th event: the cut moves to a step boundary next
    starts = np.sort(np.concatenate([group.ts[::SAMPLE] for group in groups.values()]))[::-1]
    cut = float(starts[min(len(starts) - 1, budget // SAMPLE)])
    kind, marks = step_boundaries(index)
    later = sorted(ts for ts in marks if ts >= cut)
    inside = len(later) - 1 if kind == "optimizer steps" else len(later)  # an end at the cut closes a step before it
    first: float = index.first
    last: float = index.last
    if inside > 0:
        cut = later[0]
    share = (last - cut) / (last - first) if last > first else 1.0
    span = f"{(last - cut) / 1e3:,.1f} of {(last - first) / 1e3:,.1f} ms"
    if inside > 0 and kind == "steps":
        kept_steps, what = inside, f"the last {inside} of {len(marks)} steps ({span})"
    elif inside > 0:
        kept_steps = max(1, round(steps * inside / len(marks))) if steps else 0
        what = f"the last {inside} {kind} ({span})"
    else:
        kept_steps, what = (max(1, round(steps * share)) if steps else 0), f"the last {span}"
    part = index.subset({name: group.ts >= cut for name, group in groups.items()})
    part.first, part.last, part.meta = cut, last, index.meta
    part.part = (kept_steps, f"{what}, {part.events:,} of {total:,} events: a long window is replayed in part")
    return part, *part.part


def profiler_steps(index: TraceIndex) -> int:
    """The steps a trace's ``ProfilerStep#N`` ranges mark (what the statistics count)."""
    strings = index.strings.distinct
    return sum(strings[code].startswith(STEP_PREFIX) for code in set(index.ops.name.tolist()))
