"""What gpudoctor's own presence cost the run it measured.

Outside its profiler windows the agent only counts (steps, batches, allocator
snapshots); inside a window torch.profiler traces every operator, kernel and Python
call, so those steps run slower and are left out of the step statistics. This module
says what the windows cost and whether the run came back to its speed afterwards:

- the steady throughput outside the windows against the throughput of the steps that
  overlapped a window;
- the step rate before the first window against the rate after it, in chunks of the
  same number of steps as before it: a run whose every later chunk is slower than
  before the window by more than ``SLOWDOWN`` did not come back (the chunks are the
  noise: a bursty loader's rate moves from chunk to chunk), and only when the gap is
  larger than the chunks' own spread: the steps before the window are one chunk of the
  same run, and a run whose chunks after the window differ among themselves by 20%
  (a loaded 2-core machine, a loader that drains its prefetch queue) shows a first chunk
  5% faster than the fastest later one by chance, not because a window slowed it;
- DataLoader workers that found torch.profiler on at their first batch: forked inside
  a window, they pay its tracing for every batch they make;
- windows whose CUPTI detach (Kineto's, asked for by TEARDOWN_CUPTI=1) was not seen to end
  inside their stop: after them CUPTI's callbacks may have stayed on every CUDA call;
- how long the loop stood still while a window started: torch.profiler's start (with CUDA,
  CUPTI's set-up) holds the thread at the step boundary that opened it, before any event is
  traced, so the window's own numbers never show it (measured for windows of the run's own
  steps, whose boundaries are the step records);
- how long the loop stood still after a window while torch.profiler stopped and the
  trace was written: building the trace's events costs the stopping thread about 5 us an
  event (a Python-heavy CPU loop: 1.3M Python calls traced in 0.65 s, then 6.1 s in
  torch's ``_disable_profiler`` and 2.6 s exporting 345 MB); a ResNet-50 fed by
  ``num_workers=0`` (3.9M events in a 10-step window) stood still for 26 s on an H200.
  Once per window; it is not steady state (metrics), and the report names it. After a stop
  that held the loop 2 s or more, later windows record no Python stacks
  (agent/profiler.STOP_HELD_S): the report counts them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from gpudoctor import metrics
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import Session, StepRecord

SLOWDOWN = Threshold(
    "every chunk of steps after the first profiler window slower than the steps before it by more than", 0.03,
    "share", "issue 24: gpudoctor's presence must cost the run under 3% outside its windows")
PAUSED_SHARE = Threshold(
    "the profiler windows' start and stop pauses, summed, made the run longer by more than", 0.03,
    "share", "issue 24: gpudoctor's presence must cost the run under 3%")
PAUSED_MIN = Threshold(
    "and by at least", 1.0, "s",
    "the corpus's recorded Sessions: a window's stop takes 0.1-0.9 s, once per window (at most 4)")
MIN_STEPS = CountThreshold(
    "steps needed before the first window (and twice as many after it) to compare", 8, "steps",
    "gpudoctor: a chunk of fewer steps is mostly one loader burst or one GPU queue drain")


@dataclass(frozen=True)
class Overhead:
    windows: int  # profiler windows kept
    profiled_steps: int  # steps that overlapped a window (left out of the step statistics)
    steps_per_s_outside: float | None  # steady steps outside the windows
    steps_per_s_inside: float | None  # steps that overlapped a window
    before_steps_per_s: float | None  # steady steps before the first window
    after_steps_per_s: tuple[float, float] | None  # slowest and fastest chunk after it
    traced_workers: list[int] = field(default_factory=list)  # worker pids forked inside a window
    stop_pause_s: float | None = None  # the longest time from a window's end to the loop's next step
    start_pause_s: float | None = None  # the longest time from the step that opened a window to its start
    start_paused_s: float = 0.0  # every window's start pause, summed
    stop_paused_s: float = 0.0  # every window's stop pause, summed
    # windows whose CUPTI detach was asked for but not seen to end (agent/profiler.await_detach):
    # CUPTI's callbacks may have stayed on every CUDA call of the run after them
    cupti_undetached: int = 0
    # windows that recorded no Python stacks: an earlier window's stop held the loop (STOP_HELD_S)
    stackless_windows: int = 0

    @property
    def paused_s(self) -> float:
        """How long the loop stood still at the windows' starts and stops: what they made the run longer by."""
        return self.start_paused_s + self.stop_paused_s

    @property
    def slowdown(self) -> float | None:
        """How much slower the fastest chunk after the first window ran than the steps before it
        (0.12: 12% slower), None when not compared; negative when it ran faster."""
        if self.before_steps_per_s is None or self.after_steps_per_s is None:
            return None
        return 1.0 - self.after_steps_per_s[1] / self.before_steps_per_s

    @property
    def spread(self) -> float | None:
        """How much slower the slowest chunk after the first window ran than the fastest one:
        the run's own chunk-to-chunk variation (None when not compared)."""
        if self.after_steps_per_s is None:
            return None
        low, high = self.after_steps_per_s
        return 1.0 - low / high if high > 0 else None

    @property
    def slowed(self) -> bool:
        slowdown, spread = self.slowdown, self.spread
        return slowdown is not None and slowdown > SLOWDOWN and slowdown > (spread or 0.0)

    def to_dict(self) -> dict[str, object]:
        slowdown = self.slowdown
        return {
            "windows": self.windows,
            "profiled_steps": self.profiled_steps,
            "steps_per_s_outside": _round(self.steps_per_s_outside),
            "steps_per_s_inside": _round(self.steps_per_s_inside),
            "before_steps_per_s": _round(self.before_steps_per_s),
            "after_steps_per_s": [_round(v) for v in self.after_steps_per_s] if self.after_steps_per_s else None,
            "slowdown": round(slowdown, 4) if slowdown is not None else None,
            "slowed": self.slowed,
            "traced_workers": list(self.traced_workers),
            "stop_pause_s": _round(self.stop_pause_s),
            "start_pause_s": _round(self.start_pause_s),
            "paused_s": round(self.paused_s, 3),
            "cupti_undetached": self.cupti_undetached,
            "stackless_windows": self.stackless_windows,
        }


def overhead(session: Session) -> Overhead | None:
    """What the profiler windows cost this run; None when none ran and no worker was traced."""
    traced = sorted(p.pid for p in session.processes if p.role == "worker" and p.profiler_inherited)
    windows = sorted((p.window_start_s, p.window_end_s) for p in session.windows()
                     if p.window_start_s is not None and p.window_end_s is not None)
    if not windows and not traced:
        return None
    records = session.steady_steps()
    before, after = _around_first(records, windows)
    chunks = _chunk_rates(after, len(before)) if len(before) >= MIN_STEPS and len(after) >= 2 * len(before) else []
    stops, starts = _stop_pauses(session), _start_pauses(session)
    return Overhead(
        windows=len(windows),
        profiled_steps=session.steps.profiled_steps,
        steps_per_s_outside=_rate(records),
        steps_per_s_inside=(session.steps.profiled_steps / session.steps.profiled_time_s
                            if session.steps.profiled_time_s > 0 else None),
        before_steps_per_s=_rate(before) if chunks else None,
        after_steps_per_s=(min(chunks), max(chunks)) if chunks else None,
        traced_workers=traced,
        stop_pause_s=max(stops, default=None),
        start_pause_s=max(starts, default=None),
        start_paused_s=sum(starts),
        stop_paused_s=sum(stops),
        cupti_undetached=sum(1 for p in session.windows() if p.cupti_detach not in (None, "ended")),
        stackless_windows=sum(1 for p in session.windows() if p.stacks is False),
    )


def _stop_pauses(session: Session) -> list[float]:
    """Per window of the run's own steps (_own_windows), the time from its end to the start of the
    loop's next step: the profiler's stop and the trace's export hold the thread that closed it."""
    records = session.steps.records
    return [max(0.0, start - w.window_end_s) for w in _own_windows(session)
            if (start := metrics.next_step_start(records, w.window_end_s)) is not None]


def _start_pauses(session: Session) -> list[float]:
    """Per window of the run's own steps (_own_windows), the time from the step boundary that opened
    it to its start: its events begin once torch.profiler's start returned; the step that held the
    pause is left out of the records with the window's, the one before it ends at the boundary. Where
    the step counted before the window (agent/profiler.StepCount, left out too) came right before it,
    that boundary is one step earlier: a typical step is taken off, and what the count slowed the
    step by stays in the pause."""
    records = session.steps.records
    typical = statistics.median(r.duration_s for r in records) if records else 0.0
    pauses = []
    for w in _own_windows(session):
        end = metrics.previous_step_end(records, w.window_start_s)
        if end is None:
            continue
        counted_before = w.counted_start_s is not None and end <= w.counted_start_s + 1e-3
        pauses.append(max(0.0, w.window_start_s - end - (typical if counted_before else 0.0)))
    return pauses


class OwnWindow(NamedTuple):
    window_start_s: float
    window_end_s: float
    counted_start_s: float | None  # its phase's counted step (agent/profiler.StepCount), if any


def _own_windows(session: Session) -> list[OwnWindow]:
    """The windows (both ends known) whose pauses the step records can measure: those of the run's own step source
    (another source's boundaries, or a time-bounded window's safe point, are not among the records:
    the gap to the nearest record holds other work, such as a whole evaluation between two training
    steps), and that end before the last record (a long run keeps its first steps one by one and
    counts the rest, Steps.aggregated, so the last record is no boundary of a later window)."""
    records = session.steps.records
    if not records:
        return []
    last = records[-1].t
    return [OwnWindow(w.window_start_s, w.window_end_s, w.counted_start_s) for w in session.windows()
            if w.window_start_s is not None and w.window_end_s is not None
            and w.step_source == session.steps.source and w.window_end_s <= last]


def _around_first(records: list[StepRecord], windows: list[tuple[float, float]]
                  ) -> tuple[list[StepRecord], list[StepRecord]]:
    """Steady steps before the first window, and those after it (up to the second)."""
    if not windows:
        return [], []
    start, end = windows[0]
    until = windows[1][0] if len(windows) > 1 else float("inf")
    before = [r for r in records if r.t <= start]
    after = [r for r in records if r.t - r.duration_s >= end and r.t <= until]
    return before, after


def _chunk_rates(records: list[StepRecord], size: int) -> list[float]:
    rates = []
    for i in range(0, len(records) - size + 1, size):
        rate = _rate(records[i:i + size])
        if rate is not None:
            rates.append(rate)
    return rates


def _rate(records: list[StepRecord]) -> float | None:
    total = sum(r.duration_s for r in records)
    return len(records) / total if records and total > 0 else None


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None
