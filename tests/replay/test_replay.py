"""The replay on synthetic timelines with known answers (tests/replay/timelines.py)."""

from __future__ import annotations

import pytest
from timelines import Gpu, Host, trace

from gpudoctor.collectors.trace import trace_events
from gpudoctor.replay import rates, replay_trace
from gpudoctor.replay.scenarios import gain
from gpudoctor.replay.timeline import build

STEPS = 10


def replay(data: dict, **kw):
    summary = replay_trace(trace_events(data), **kw)
    assert summary is not None and summary.error is None
    return summary


def span_of(data: dict) -> float:
    events = data["traceEvents"]
    return max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)


def test_the_measured_window_replays_as_measured():
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.data_wait(3000)
        host.launch(1000)
        host.sync()
        host.python(200)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    assert summary.baseline_span_us == pytest.approx(span_of(data), rel=1e-3)


def test_a_wait_hidden_by_queued_gpu_work_predicts_nothing():
    # each step: 8 ms waiting for a batch, then a 10 ms kernel: the host runs ahead of the GPU,
    # so the GPU never waits for data and removing the wait changes nothing
    gpu = Gpu()
    gpu.run(0.0, 10_000, 1)  # the window opens with the previous step's kernel still running
    host = Host(gpu)
    for _ in range(STEPS):
        host.data_wait(8000)
        host.launch(10_000)
    summary = replay(trace(host), steps=STEPS)
    assert gain(summary, "data") == pytest.approx(1.0, abs=0.01)


def test_a_starving_loader_predicts_the_gpu_bound_step():
    # 8 ms waiting for a batch, a 1 ms kernel: without the wait the kernels run back to back
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.data_wait(8000)
        host.launch(1000)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    # the first kernel starts after its dispatch (5 us) and latency (5 us), the rest follow it
    expected = span_of(data) / (5 + 5 + STEPS * 1000)
    assert gain(summary, "data") == pytest.approx(expected, rel=0.01)
    assert gain(summary, "data") > 7


def test_syncs_that_drain_the_queue_cost_what_the_gpu_would_have_overlapped():
    # launch a 1 ms kernel, wait for it, 0.5 ms of Python, again: without the waits the host
    # (0.51 ms a step) runs ahead and the GPU works back to back
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.launch(1000)
        host.sync()
        host.python(500)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    expected = span_of(data) / (5 + 5 + STEPS * 1000)
    assert gain(summary, "sync") == pytest.approx(expected, rel=0.01)
    assert 1.4 < gain(summary, "sync") < 1.6


def test_a_launch_bound_chain_collapses_to_one_launch_at_the_graph_rate():
    # 100 kernels of 1 us a step, each costing the host 10 us: host-bound; as one graph per chain,
    # the kernels follow each other at the measured graph rate
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS * 100):
        host.launch(1.0)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    kernels = STEPS * 100
    graph = 5 + kernels * 1.0 + (kernels - 1) * (rates.GRAPH_KERNEL_US - 1.0)  # latency, then back to back
    assert gain(summary, "launch") == pytest.approx(span_of(data) / graph, rel=0.01)


def test_pageable_copies_made_pinned_run_at_the_pinned_rate_and_stop_blocking():
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.copy_htod(4 * 2**20, 300.0, pageable=True)
        host.launch(100.0)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    # the copies no longer block (GPU-bound) and move their bytes at the link's pinned rate
    per_step = 4 * 2**20 / rates.PINNED_BYTES_PER_US + 100.0
    assert gain(summary, "pinned") == pytest.approx(span_of(data) / (STEPS * per_step), rel=0.03)
    # with a pinned copy in the trace, its own rate is used instead
    host.copy_htod(8 * 2**20, 100.0, pageable=False)
    measured = replay(trace(host), steps=STEPS)
    scenario = next(s for s in measured.scenarios if s.name == "pinned")
    assert "measured in this trace" in scenario.detail


def test_an_autograd_worker_burst_moves_with_the_thread_that_waited_for_it():
    # the main thread launches a forward kernel, then blocks in backward() while the autograd
    # thread launches two; then it waits 2 ms for data. Removing the data wait must move the
    # backward launches too, or the window could not get shorter than the worker's old clock
    gpu = Gpu()
    main, worker = Host(gpu, tid=1), Host(gpu, tid=2)
    for _ in range(STEPS):
        main.launch(100.0)
        worker.t = main.t
        worker.launch(100.0)
        worker.launch(100.0)
        main.python(worker.t - main.t + 10)  # blocked in backward() until the worker is done
        main.data_wait(2000)
    data = trace(main, worker)
    timeline = build(trace_events(data))
    assert timeline is not None and timeline.threads == 2
    assert {item.thread for item in timeline.items} == {timeline.main_thread}  # one thread of control
    summary = replay(data, steps=STEPS)
    assert summary.baseline_span_us == pytest.approx(span_of(data), rel=1e-3)
    assert gain(summary, "data") == pytest.approx(span_of(data) / (STEPS * 300 + 15), rel=0.03)


def test_tracing_overhead_on_the_host_is_calibrated_away():
    # the traced host takes 1 ms a step (100 launches of 10 us); the run outside the window
    # took 0.5 ms a step: the host costs scale by one half
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS * 100):
        host.launch(1.0)
    summary = replay(trace(host), steps=STEPS, unprofiled_step_us=500.0)
    assert summary.host_scale == pytest.approx(0.5, rel=0.02)
    assert summary.baseline_span_us == pytest.approx(STEPS * 500.0, rel=0.02)
    assert "tracing slowed the host" in summary.calibration


def test_a_gpu_bound_window_is_not_calibrated_by_scaling_the_host():
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.launch(10_000)
    # outside the window the steps were faster for a reason the host cannot explain
    summary = replay(trace(host), steps=STEPS, unprofiled_step_us=8000.0)
    assert summary.host_scale == 1.0
    assert "not the tracing's host overhead" in summary.calibration


def test_no_host_thread_no_replay():
    gpu = Gpu()
    gpu.run(0.0, 10.0, 1)
    assert replay_trace(trace_events({"traceEvents": gpu.events})) is None


def test_a_value_kept_on_the_gpu_still_costs_the_host_the_operator_that_consumes_it():
    """Issue 25: a `.item()` after each layer of a host-bound loop. Without the syncs the host still
    dispatches every operator: the next layer's (its 40 us shares the gap after the read) and one per
    value (the remedy consumes it on the GPU, `running += v.detach()`, at about the read's own cost).
    Only the wait for the GPU goes, so the gain is the wait's share of the host's step, not what
    dropping every operator that starts inside the read would buy."""
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS * 8):
        host.launch(20.0, dispatch_us=40.0)
        host.python(3.0)
        host.item()
        host.python(3.0)
    summary = replay(trace(host), steps=STEPS)
    # a layer: 45 us launching (the kernel runs 45-65 us into it), 3 of Python, the read 5 + 5 (its
    # copy queued behind the kernel: 65-66 us) + its sync, which returns 4 us after the copy (at 70 us:
    # 12 us in it) + 5, 3 of Python. Without the wait the sync costs its 4 us of waking up, and the
    # GPU (21 us a layer) keeps up with the host
    measured, remedied = 45 + 3 + 5 + 5 + 12 + 5 + 3, 45 + 3 + 5 + 5 + 4 + 5 + 3
    assert gain(summary, "sync") == pytest.approx(measured / remedied, rel=0.02)


def test_a_pinned_copy_runs_at_the_links_rate_not_at_a_multiple_of_its_pageable_time():
    """256 MiB at 6.8 GB/s from pageable memory (a loaded host): pinned, it moves at the link's rate,
    55.3 GB/s, not at 4x its pageable rate (27 GB/s, the table's ratio of 55.3 to 13.8)."""
    nbytes = 256 * 2**20
    pageable_us = nbytes / 6.8e3
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.copy_htod(nbytes, pageable_us, pageable=True)
        host.launch(100.0)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    per_step = nbytes / rates.PINNED_BYTES_PER_US + 100.0
    assert gain(summary, "pinned") == pytest.approx(span_of(data) / (STEPS * per_step), rel=0.03)
    assert gain(summary, "pinned") > 7.0  # the ratio of rates would have said about 4x


def _user_frame(host: Host, start: float) -> None:
    """The user's own loop around what the host did since `start` (a with_stack trace)."""
    host._x("python_function", "train.py(12): main", start, host.t - start)


def test_a_burst_of_tiny_copies_in_the_users_loop_folds_into_one_stacked_copy():
    """400 tiny pageable copies a step, the user's list comprehension between them (its Python
    frame makes that time the user's own): each copy blocks its call ~13 us; stacked, one copy."""
    gpu = Gpu()
    host = Host(gpu)
    begin = host.t
    for _ in range(STEPS):
        for _ in range(400):
            host.copy_htod(256, 2.0, pageable=True)
            host.python(2.0)
        for _ in range(3):  # the step's own work ends the run: the next step's tensors come after it
            host.launch(50.0)
    _user_frame(host, begin)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    scenario = next(s for s in summary.scenarios if s.name == "small_copies")
    assert scenario.changed == STEPS * 399
    # per step: 400 copy calls of ~13 us each, 2 us of Python after each, then 3 kernels; stacked:
    # one copy call at a launch's cost, the Python kept (400 x 2 us), the kernels after it
    stacked = 400 * 2.0 + 5.0 + 3 * 10.0  # host-bound: the kernels run under the next step's Python
    assert gain(summary, "small_copies") == pytest.approx(span_of(data) / (STEPS * stacked), rel=0.05)


def test_tiny_copies_each_feeding_a_kernel_fold_and_the_kernels_stay():
    """`total += t.to(device)` for 400 tensors: the copies fold into the first, their syncs stop
    blocking; the 400 small kernels (and their dispatch) stay."""
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        for _ in range(400):
            host.copy_htod(256, 2.0, pageable=True)
            host.sync()
            host.launch(1.0)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    scenario = next(s for s in summary.scenarios if s.name == "small_copies")
    assert scenario.changed == STEPS * 400 - 1  # one run: the kernels do not end it
    # each tensor cost its copy call (blocking until the copy ended) and a sync; the kernels' launches
    # (10 us of host each) remain: the step is at least their cost
    kernels = STEPS * 400 * 10.0
    assert span_of(data) / kernels > gain(summary, "small_copies") > 1.5
