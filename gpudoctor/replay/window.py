"""The part of a long profiled window that the replay models.

A replay walks every host item and GPU operation, once per what-if: its cost grows with
the window while its answer, the ratio of a step's time with and without a cause, does
not (a window repeats its steps). A window of more than REPLAY_MAX_EVENTS events is
replayed over its latest stretch of at most that many, begun at a step boundary where one
falls inside it (see _boundaries): a stretch cut inside a step would begin with GPU work
whose launches it lacks. Every committed recorded window (at most 137,000 events) is
replayed whole; the part replayed is named in ReplaySummary.scope and the predictions.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.collectors.kineto_names import STEP_PREFIX
from gpudoctor.collectors.trace_decode import TraceIndex
from gpudoctor.replay.timeline import DATA_ANNOTATION, OPTIMIZER_ANNOTATION

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
    kind, marks = _boundaries(index)
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


def _boundaries(index: TraceIndex) -> tuple[str, list[float]]:
    """Where steps begin, by the best marks the trace holds: ``ProfilerStep#N`` starts, else
    the ends of ``optimizer.step()`` (a training step ends with it), else the starts of
    DataLoader ``__next__`` calls (an inference loop fetches its next batch)."""
    steps: dict[str, float] = {}
    optimizer: list[float] = []
    loader: list[float] = []
    ops = index.ops
    strings = index.strings.distinct
    marked = {code for code in set(ops.name.tolist())  # a few hundred distinct names: test those, not every event
              if strings[code].startswith((STEP_PREFIX, OPTIMIZER_ANNOTATION)) or DATA_ANNOTATION.match(strings[code])}
    rows = np.flatnonzero(np.isin(ops.name, list(marked))).tolist() if marked else []
    for row in rows:
        name: str = strings[ops.name[row]]
        ts = float(ops.ts[row])
        if name.startswith(STEP_PREFIX):
            steps[name] = min(ts, steps.get(name, ts))
        elif name.startswith(OPTIMIZER_ANNOTATION):
            optimizer.append(ts + float(ops.dur[row]))
        else:
            loader.append(ts)
    if steps:
        return "steps", list(steps.values())
    if optimizer:
        return "optimizer steps", optimizer
    return "batches", loader


def profiler_steps(index: TraceIndex) -> int:
    """The steps a trace's ``ProfilerStep#N`` ranges mark (what the statistics count)."""
    strings = index.strings.distinct
    return sum(strings[code].startswith(STEP_PREFIX) for code in set(index.ops.name.tolist()))


PICTURE_STEPS = 3  # the steps a report draws: enough to see the pattern repeat, few enough to read


def picture_range(index: TraceIndex) -> tuple[float, float, list[float]]:
    """(start, end, the starts of the steps between them) of the last PICTURE_STEPS complete
    steps of a window before its last one, by the marks _boundaries finds; the whole window, with no step start,
    when it marks fewer than two. The collectors draw this part, and the replay draws it again
    without each cause: both ask here, so both draw the same steps."""
    marks = sorted(set(_boundaries(index)[1]))
    marks = [m for m in marks if index.first <= m <= index.last]
    if len(marks) < 2:
        return float(index.first), float(index.last), []
    # the window's last step is left out when others can stand in: it holds the window's closing
    # (the profiler stopping, gpudoctor's export), not the loop's own pattern
    chosen = marks[-PICTURE_STEPS - 2:-1] if len(marks) >= PICTURE_STEPS + 2 else marks[-PICTURE_STEPS - 1:]
    return chosen[0], chosen[-1], chosen[:-1]
