"""GD002 observer-effect: gpudoctor's own presence changed the run it measured.

What it detects
    The steps after gpudoctor's first profiler window ran slower than the steps
    before it, by more than {{SLOWDOWN}} in every chunk of steps that followed
    (the run did not come back to its speed) and by more than those chunks differ
    among themselves (the run's own noise); or DataLoader workers ran with
    torch.profiler on because they were forked while a profiler window ran. As
    information: the loop stood still while the windows started and stopped for
    more than {{PAUSED_SHARE}} of the run and at least {{PAUSED_MIN}} in all (a window's
    stop builds an event for every operator and Python call it traced: seconds
    for a loop that makes its batches in its own process with Python transforms).

Why it matters
    A diagnosis is only worth what the run it measured is worth. A worker forked
    inside a profiler window keeps the profiler's tracing for its whole life (every
    operator and Python call it makes is recorded), so it makes batches 2-3 times
    slower and the report would blame the input pipeline for a slowdown the
    measurement caused. gpudoctor closes its window before any fork on the window's
    thread and switches the inherited tracing off in a child forked from another
    thread; this check is the guard that says so when it happens anyway (a profiler
    window of the workload's own, a fork it could not see).

How it is measured
    Steps that overlapped a profiler window are left out of the step statistics and
    counted apart (their rate is the window's own cost, stated in every report).
    The steady steps before the first window (at least {{MIN_STEPS}}) are compared
    with chunks of as many steps after it; each DataLoader worker reports at its
    first batch whether torch.profiler was on in it. A slowdown's message also
    names the windows whose CUPTI detach (asked for with TEARDOWN_CUPTI=1) was not
    seen to end inside their stop: CUPTI's callbacks may have stayed on since.

What to do
    A pause at a window is once per window (at most 4): the steps around it are left
    out of the statistics, and a long run hardly notices it. To shorten it, trace
    fewer steps (`--profile-steps 3`) or fewer windows (`--profile-windows 1`).
    For a slowdown: read the findings with care, the slowdown is in the measurement. Run again with
    `--no-profile` to compare, and report the run to gpudoctor's issue tracker. A
    workload that runs its own torch.profiler should create its DataLoader iterator
    (which starts the workers) before the profiler starts, or use persistent workers
    started outside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis.observer import MIN_STEPS, PAUSED_MIN, PAUSED_SHARE, SLOWDOWN, Overhead, overhead
from gpudoctor.model import Evidence, Finding, Remedy, Skip, check

if TYPE_CHECKING:
    from gpudoctor.session import Session

TITLE = "gpudoctor's measurement changed the run"


@check("GD002", "observer-effect", stage=0, title=TITLE, thresholds=(SLOWDOWN, MIN_STEPS, PAUSED_SHARE, PAUSED_MIN))
def run(session: Session) -> list[Finding]:
    cost = overhead(session)
    if cost is None:
        raise Skip("no profiler window ran in the workload: gpudoctor only counted steps and batches there")
    findings = []
    if cost.traced_workers:
        pids = ", ".join(str(p) for p in cost.traced_workers[:8])
        findings.append(Finding(
            severity="warning",
            title="DataLoader workers ran with the profiler on (forked inside a profiler window)",
            message=(f"{len(cost.traced_workers)} DataLoader worker(s) (pid {pids}) found torch.profiler on at their "
                     "first batch: they were started while a profiler window ran, and record every operator and "
                     "Python call they make for the rest of their life, so they make batches 2-3 times slower. "
                     "The data-stage findings may describe this slowdown, not the workload's."),
            evidence={"traced_workers": Evidence(len(cost.traced_workers), label="workers traced")},
            remedy=Remedy("Compare with a run under `--no-profile`. If the workload runs its own torch.profiler, "
                          "start the DataLoader's workers (create its iterator) before the profiler starts."),
        ))
    if cost.slowed and cost.before_steps_per_s is not None and cost.after_steps_per_s is not None:
        low, high = cost.after_steps_per_s
        cupti = (f" After {cost.cupti_undetached} of the windows, CUPTI's detach was not seen to end: its callbacks "
                 "may have stayed on every CUDA call since." if cost.cupti_undetached else "")
        findings.append(Finding(
            severity="warning",
            title="The run slowed down after the profiler window and did not come back",
            message=(f"Before the first profiler window the steps ran at {cost.before_steps_per_s:.3g} steps/s; "
                     f"after it, every chunk of as many steps ran at {low:.3g}-{high:.3g} steps/s "
                     f"({cost.slowdown:.0%} slower at best). The steady numbers of this report come mostly from "
                     f"after the window: compare with a run under `--no-profile`.{cupti}"),
            evidence={"before": Evidence(round(cost.before_steps_per_s, 3), "steps/s", label="before the window"),
                      "after": Evidence(round(high, 3), "steps/s", label="after it (fastest chunk)"),
                      "slowdown": Evidence(round(cost.slowdown or 0.0, 4), "share", label="slower")},
            remedy=Remedy("Run again with `--no-profile` and compare the throughput; if it differs, report it "
                          "to gpudoctor with both reports."),
        ))
    paused = _paused(session, cost)
    if paused is not None:
        findings.append(paused)
    return findings


def _paused(session: Session, cost: Overhead) -> Finding | None:
    """Information: the loop stood still at the windows' starts and stops for a share of the run."""
    paused = cost.paused_s
    share = paused / session.duration_s if session.duration_s > 0 else 0.0
    if paused < PAUSED_MIN or share <= PAUSED_SHARE:
        return None
    parts = []
    if cost.start_paused_s >= 0.05:
        parts.append(f"{cost.start_paused_s:.3g} s at their start (torch.profiler's start: CUPTI's set-up on CUDA)")
    if cost.stop_paused_s >= 0.05:
        parts.append(f"{cost.stop_paused_s:.3g} s at their stop (building an event for every operator and Python "
                     "call traced, and writing the trace)")
    return Finding(
        severity="info",
        title="The profiler windows paused the loop",
        message=(f"The loop stood still {paused:.3g} s at gpudoctor's profiler windows ({share:.0%} of the run): "
                 f"{' and '.join(parts)}. The steps around the windows are left out of this report's statistics, "
                 "so its numbers stand; only the run took longer, once per window."),
        evidence={"paused": Evidence(round(paused, 3), "s", label="loop stood still at the windows"),
                  "share": Evidence(round(share, 4), "share", label="of the run")},
        remedy=Remedy("Nothing to fix in the workload. To shorten the pause, trace fewer steps "
                      "(`--profile-steps 3`) or fewer windows (`--profile-windows 1`)."),
    )
