"""GD002's slowdown must stand out of the run's own chunk-to-chunk noise (synthetic steps, known answer).

The steps before the first window are one chunk of the run. A run whose chunks after the
window vary by 20% among themselves (a loaded 2-core CI machine, a loader that drains its
prefetch queue in bursts) had its first chunk 5-10% faster than the fastest later one by
chance, and GD002 said the window had slowed it: an input-bound e2e test saw GD002 rank
first under load.
"""

from __future__ import annotations

from helpers import make_session, make_steps

from gpudoctor.analysis.observer import overhead
from gpudoctor.session import ProfileSummary


def session_with(before_s: float, after_chunks_s: list[float], chunk: int = 10):
    """`chunk` steps of `before_s` each, a window of one second, then chunks of `chunk` steps."""
    steps = make_steps(chunk, before_s)
    start = steps[-1].t
    t = start + 1.0
    for duration in after_chunks_s:
        more = make_steps(chunk, duration, start_t=t)
        steps += more
        t = more[-1].t
    window = ProfileSummary(steps=5, window_s=1.0, window_start_s=start, window_end_s=start + 1.0)
    return make_session(steps=steps, step_source="optimizer", profile=window)


def test_a_steady_slowdown_after_the_window_is_found():
    cost = overhead(session_with(0.010, [0.012, 0.0121, 0.0119, 0.012]))  # 17% slower, chunks within 2%
    assert cost is not None and cost.slowed
    assert 0.15 < (cost.slowdown or 0) < 0.18


def test_a_first_chunk_faster_only_by_the_runs_own_noise_is_not_a_slowdown():
    # the later chunks range 0.0105-0.0130 s a step (19% apart): the first chunk at 0.0100 is
    # 5% faster than the fastest of them, well inside that spread
    cost = overhead(session_with(0.0100, [0.0105, 0.0130, 0.0112, 0.0125]))
    assert cost is not None
    assert cost.slowdown is not None and cost.slowdown > 0.03
    assert not cost.slowed


def test_a_slowdown_larger_than_the_spread_is_still_found():
    # chunks 10% apart, but all at least 40% slower than before the window (issue 24's loop)
    cost = overhead(session_with(0.015, [0.025, 0.0275, 0.026, 0.027]))
    assert cost is not None and cost.slowed
