"""What gpudoctor's profiler windows cost a run (analysis/observer.py) and GD002, on synthetic
step timelines of known answer."""

from __future__ import annotations

import pytest
from helpers import make_session, make_steps, run_check

from gpudoctor.analysis.observer import overhead
from gpudoctor.checks.gd002_observer_effect import run as gd002
from gpudoctor.session import ProcessInfo, ProfileSummary


def timeline(before_s: float, after_s: list[float], n_before: int = 10, n_after: int = 10):
    """`n_before` steps of `before_s`, a window from there to 1 s later, then chunks of
    `n_after` steps of each duration in `after_s`."""
    steps = make_steps(n_before, before_s)
    window = (steps[-1].t, steps[-1].t + 1.0)
    t = window[1]
    for duration in after_s:
        chunk = make_steps(n_after, duration, start_t=t)
        steps += chunk
        t = chunk[-1].t
    profile = ProfileSummary(steps=10, window_start_s=window[0], window_end_s=window[1], step_source="optimizer")
    session = make_session(steps=steps, profile=profile, step_source="optimizer")
    session.steps.profiled_steps, session.steps.profiled_time_s = 10, 1.0
    return session


def test_a_run_that_stays_slower_after_the_window_is_flagged():
    session = timeline(0.020, [0.024, 0.023, 0.025, 0.024])
    cost = overhead(session)
    assert cost is not None and cost.before_steps_per_s == pytest.approx(50.0)
    assert cost.after_steps_per_s == pytest.approx((40.0, 1 / 0.023))
    assert cost.slowed and cost.slowdown == pytest.approx(1 - (1 / 0.023) / 50.0)
    outcome, findings = run_check(gd002.check, session)
    assert outcome.status == "finding" and "did not come back" in findings[0].title
    assert cost.steps_per_s_inside == pytest.approx(10.0)


def test_a_run_that_comes_back_to_its_speed_is_not_flagged():
    # the chunk right after the window is slow (the export), the later ones are as before
    session = timeline(0.020, [0.030, 0.020, 0.0202, 0.0199])
    cost = overhead(session)
    assert cost is not None and not cost.slowed and cost.slowdown is not None and cost.slowdown < 0.03
    assert run_check(gd002.check, session)[0].status == "pass"


def test_a_slowdown_within_three_percent_is_not_flagged():
    assert not overhead(timeline(0.020, [0.0205, 0.0206, 0.0205])).slowed


def test_too_few_steps_on_either_side_are_not_compared():
    short_before = overhead(timeline(0.020, [0.03] * 4, n_before=5))
    assert short_before.before_steps_per_s is None and not short_before.slowed
    short_after = overhead(timeline(0.020, [0.03], n_after=15))
    assert short_after.after_steps_per_s is None and not short_after.slowed


def test_workers_forked_inside_a_window_are_a_finding_of_their_own():
    session = timeline(0.020, [0.020] * 3)
    session.processes = [ProcessInfo(pid=1, role="main"), ProcessInfo(pid=2, role="worker", profiler_inherited=True),
                         ProcessInfo(pid=3, role="worker")]
    cost = overhead(session)
    assert cost.traced_workers == [2] and not cost.slowed
    outcome, findings = run_check(gd002.check, session)
    assert outcome.status == "finding" and len(findings) == 1 and "pid 2" in findings[0].message


def test_a_run_without_windows_is_skipped_with_the_reason():
    session = make_session(steps=make_steps(30, 0.02))
    assert overhead(session) is None
    outcome, _ = run_check(gd002.check, session)
    assert outcome.status == "skipped" and "no profiler window" in outcome.reason


def test_the_loops_pause_while_a_window_stops_is_measured_and_named():
    """The profiler's stop runs on the thread that closed the window: no step until it returns (26 s for a
    3.9M-event window on an H200). Here the window ends at 1.2 s and the next step starts 26 s later."""
    from gpudoctor.reports._common import overhead_text

    steps = make_steps(10, 0.1, start_t=0.0)
    window = (steps[-1].t, steps[-1].t + 0.2)
    steps += make_steps(10, 0.1, start_t=window[1] + 26.0)
    profile = ProfileSummary(steps=2, window_start_s=window[0], window_end_s=window[1], step_source="optimizer")
    session = make_session(steps=steps, profile=profile, step_source="optimizer")
    cost = overhead(session)
    assert cost is not None and cost.stop_pause_s == pytest.approx(26.0)
    assert "stood still 26 s after a window" in overhead_text(cost.to_dict())
    # a stop that hardly held the loop (0.2 s) is measured, not named
    quick = timeline(0.020, [0.020] * 3)
    assert overhead(quick).stop_pause_s == pytest.approx(0.0)
    assert "stood still" not in overhead_text(overhead(quick).to_dict())


@pytest.mark.parametrize("detach, named", [("ended", False), ("timeout", True), ("no thread", True), (None, False)])
def test_a_slowdown_after_a_window_whose_cupti_detach_was_not_seen_to_end_says_so(detach, named):
    session = timeline(0.020, [0.024, 0.023, 0.025, 0.024])
    session.profile.cupti_detach = detach
    cost = overhead(session)
    assert cost.cupti_undetached == (1 if named else 0) and cost.to_dict()["cupti_undetached"] == cost.cupti_undetached
    outcome, findings = run_check(gd002.check, session)
    assert outcome.status == "finding"
    assert ("CUPTI's detach was not seen to end" in findings[0].message) is named
    from gpudoctor.reports._common import overhead_text

    assert ("CUPTI's detach not seen to end after 1 window(s)" in overhead_text(cost.to_dict())) is named


def test_the_loops_pause_while_a_window_starts_is_measured_and_named():
    """torch.profiler's start holds the thread at the step boundary that opened the window (CUPTI's set-up,
    seconds the first time on a machine) before the window's first event: synthetic steps of 0.1 s, the
    window opened at the 10th step's end (1.0 s) and started 12 s later, then steps again."""
    from gpudoctor.reports._common import overhead_text

    steps = make_steps(10, 0.1, start_t=0.0)
    opened = steps[-1].t
    window = (opened + 12.0, opened + 12.5)
    steps += make_steps(10, 0.1, start_t=window[1])
    profile = ProfileSummary(steps=5, window_start_s=window[0], window_end_s=window[1], step_source="optimizer")
    session = make_session(steps=steps, profile=profile, step_source="optimizer")
    cost = overhead(session)
    assert cost is not None and cost.start_pause_s == pytest.approx(12.0)
    assert "stood still 12 s while a window started" in overhead_text(cost.to_dict())
    # a window of another source (DataLoader batches) opened between two of the run's steps: not measured
    profile.step_source = "loader"
    assert overhead(session).start_pause_s is None
    assert "while a window started" not in overhead_text(overhead(session).to_dict())
    # a window after the last step kept one by one (a long run counts the rest): no boundary to measure from
    profile.step_source = "optimizer"
    session.steps.records = steps[:10]
    session.steps.aggregated = 10
    assert overhead(session).start_pause_s is None


@pytest.mark.parametrize("stacks, counted", [(False, 1), (True, 0), (None, 0)])
def test_windows_recorded_without_python_stacks_are_counted_and_named(stacks, counted):
    """After a window whose stop held the loop for seconds, the agent records later windows without
    Python stacks (agent/profiler.STOP_HELD_S): the report says so, since they have no call sites."""
    from gpudoctor.reports._common import overhead_text

    session = timeline(0.020, [0.020] * 3)
    session.profile.stacks = stacks
    cost = overhead(session)
    assert cost.stackless_windows == counted and cost.to_dict()["stackless_windows"] == counted
    assert ("1 window(s) recorded without Python stacks" in overhead_text(cost.to_dict())) is bool(counted)


@pytest.mark.parametrize("pause, duration, named", [(26.0, 30.0, True), (26.0, 2000.0, False), (0.8, 3.0, False)])
def test_windows_that_paused_a_share_of_the_run_are_information_in_gd002(pause, duration, named):
    """A loop that stood still 26 s at a window's stop in a 30 s run is told (information: the steps around the
    window are left out, the findings stand); the same pause in a run of half an hour, or a small window's
    0.8 s stop, is not (under 3% of the run, or under a second)."""
    steps = make_steps(10, 0.1, start_t=0.0)
    window = (steps[-1].t, steps[-1].t + 0.2)
    steps += make_steps(10, 0.1, start_t=window[1] + pause)
    profile = ProfileSummary(steps=2, window_start_s=window[0], window_end_s=window[1], step_source="optimizer")
    session = make_session(steps=steps, profile=profile, step_source="optimizer", duration_s=duration)
    cost = overhead(session)
    assert cost.paused_s == pytest.approx(pause) and cost.to_dict()["paused_s"] == pytest.approx(pause)
    outcome, findings = run_check(gd002.check, session)
    paused = [f for f in findings if f.title == "The profiler windows paused the loop"]
    assert bool(paused) is named and outcome.status == ("finding" if named else "pass")
    if named:
        assert paused[0].severity == "info" and f"{pause:.3g} s at their stop" in paused[0].message


def test_a_time_window_between_two_steps_is_no_pause_of_the_loop():
    """A time-bounded window (an evaluation without steps) between two training steps: the gap between
    those steps is the evaluation's, not the window's stop."""
    steps = make_steps(10, 0.1, start_t=0.0)
    steps += make_steps(10, 0.1, start_t=steps[-1].t + 30.0)
    opened = steps[9].t + 10.0
    profile = ProfileSummary(steps=0, window_start_s=opened, window_end_s=opened + 2.0, step_source="time")
    session = make_session(steps=steps, profile=profile, step_source="optimizer")
    cost = overhead(session)
    assert cost.stop_pause_s is None and cost.start_pause_s is None and cost.paused_s == 0.0


def test_the_step_counted_right_before_a_window_is_no_start_pause_but_its_slowing_is():
    """Steps of 0.1 s; the 11th was counted (a profile function: 0.25 s, left out of the records), and the window
    opened at its end, started 0.05 s later. The pause is the start's 0.05 s plus the count's 0.15 s over
    a typical step, not the whole counted step."""
    steps = make_steps(10, 0.1, start_t=0.0)
    counted_from = steps[-1].t
    window = (counted_from + 0.25 + 0.05, counted_from + 0.8)
    steps += make_steps(10, 0.1, start_t=window[1])
    profile = ProfileSummary(steps=5, window_start_s=window[0], window_end_s=window[1], step_source="optimizer",
                             counted_start_s=counted_from, counted_calls=400_000, stop_predicted_s=7.2, stacks=False)
    session = make_session(steps=steps, profile=profile, step_source="optimizer")
    assert overhead(session).start_pause_s == pytest.approx(0.2)
    profile.counted_start_s = counted_from - 3.0  # counted earlier: the boundary before the window is its own
    assert overhead(session).start_pause_s == pytest.approx(0.3)
