"""The replay on synthetic timelines with known answers (tests/replay/timelines.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from timelines import Gpu, Host, trace

from gpudoctor.collectors.trace import trace_events
from gpudoctor.metrics import UnprofiledSteps
from gpudoctor.replay import edits, rates, replay_trace
from gpudoctor.replay.scenarios import gain
from gpudoctor.replay.simulate import Plan
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


def test_a_launch_bound_chain_collapses_to_one_compiled_call_at_the_graph_rate():
    # 100 kernels of 1 us a step, each costing the host 10 us: host-bound; as one graph per chain,
    # the graph starts once its compiled call's host work is done, and its kernels follow each other
    # at the measured graph rate
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS * 100):
        host.launch(1.0)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    kernels = STEPS * 100
    call = rates.graph_call_us(kernels)
    graph = call + 5 + kernels * 1.0 + (kernels - 1) * (rates.GRAPH_KERNEL_US - 1.0)  # the call, latency, kernels
    assert gain(summary, "launch") == pytest.approx(span_of(data) / graph, rel=0.01)


def test_a_compiled_call_costs_more_than_the_launches_of_a_short_chain():
    """Two 1 us kernels a step, 10 us of host each, between 200 us of the user's Python: one graph call
    (about 118 us) costs the host more than the two launches it replaces, so the what-if buys nothing."""
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.launch(1.0)
        host.launch(1.0)
        host.python(200.0)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    assert gain(summary, "launch") is None or gain(summary, "launch") < 1.0


def _model_call(host: Host, launches: int, tail_us: float = 0.0) -> None:
    """One call of the model (an outermost nn.Module frame, as with_stack records it): `launches`
    kernels of 1 us, then `tail_us` of its own Python."""
    start = host.t
    for _ in range(launches):
        host.launch(1.0)
    host.python(tail_us)
    host._x("python_function", "nn.Module: MLP_0", start, host.t - start)


def test_each_call_of_the_model_is_one_compiled_call_and_what_runs_outside_it_stays():
    """A batch-1 serving loop with Python stacks: per step, the model's call (an outermost nn.Module
    frame) launches 25 kernels of 1 us at 10 us of host each, then the loop launches one kernel of its
    own outside the model. Compiled, each of the model's calls costs the host one compiled call and its
    graph starts after it; the loop's own launch keeps its measured cost (the what-if before took the
    whole window as one graph: 5.6x on such a loop that realized 3.2x)."""
    gpu = Gpu()
    host = Host(gpu)
    begin = host.t
    for _ in range(STEPS):
        _model_call(host, 25)
        host.launch(1.0)  # the loop's own op, outside the model
    _user_frame(host, begin)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    scenario = next(s for s in summary.scenarios if s.name == "launch")
    assert scenario.detail.startswith(f"{STEPS} launch chains") and "nn.Module" in scenario.detail
    # per step on the host: the compiled call, then the loop's own launch (dispatch 5 + call 5 us)
    per_step = rates.graph_call_us(25) + 10.0
    assert gain(summary, "launch") == pytest.approx(span_of(data) / (STEPS * per_step), rel=0.03)


def test_a_compiled_training_step_is_a_forward_call_and_a_backward_call():
    """The model's forward is a module call on the main thread; its backward runs on the autograd
    worker (no Python frames there) while the main thread waits: a compiled model replays a graph
    for each, so each backward burst is a compiled call of its own, not left eager."""
    gpu = Gpu()
    main, worker = Host(gpu, tid=1), Host(gpu, tid=2)
    begin = main.t
    for _ in range(STEPS):
        _model_call(main, 5)
        worker.t = main.t
        for _ in range(20):
            worker.launch(1.0)
        main.python(worker.t - main.t + 10)  # blocked in backward() until the worker is done
    _user_frame(main, begin)
    summary = replay(trace(main, worker), steps=STEPS)
    scenario = next(s for s in summary.scenarios if s.name == "launch")
    assert scenario.detail.startswith(f"{2 * STEPS} launch chains"), scenario.detail
    # per step: two compiled calls instead of 25 launches of 10 us; the 10 us after the backward and the
    # first launch's dispatch (5 us, in the gap that crosses into the next call) stay
    per_step = rates.graph_call_us(5) + rates.graph_call_us(20) + 10.0 + 5.0
    assert gain(summary, "launch") == pytest.approx((25 * 10.0 + 10.0) / per_step, rel=0.05)


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel"


def test_plain_compile_launches_kernel_by_kernel_fusing_elementwise_runs_and_keeps_the_engines_backward():
    """A training step: the forward (a module call) launches GEMM, two elementwise kernels, GEMM and one
    more elementwise; autograd's worker launches GEMMs and elementwise kernels in turn. Compiled without
    CUDA graphs, the forward is one compiled call launching 4 kernels (the two elementwise ones fused),
    the backward one compiled call launching its 20 (no two fusable kernels adjacent), each at the
    measured compiled costs; the CUDA-graph what-if of the same window buys more."""
    gpu = Gpu()
    main, worker = Host(gpu, tid=1), Host(gpu, tid=2)
    begin = main.t
    for _ in range(STEPS):
        start = main.t
        for kernel in (GEMM, "void gelu_kernel", "void add_kernel", GEMM, "void layer_norm_kernel"):
            main.launch(1.0, kernel=kernel)
        main._x("python_function", "nn.Module: MLP_0", start, main.t - start)
        worker.t = main.t
        for k in range(20):
            worker.launch(1.0, kernel=GEMM if k % 2 else "void relu_backward")
        main.python(worker.t - main.t + 10)  # blocked in backward() until the worker is done
    _user_frame(main, begin)
    summary = replay(trace(main, worker), steps=STEPS)
    scenario = next(s for s in summary.scenarios if s.name == "compiled")
    assert scenario.detail.startswith(f"{2 * STEPS} launch chains"), scenario.detail
    assert f"{25 * STEPS:,} launches issued as {24 * STEPS:,}" in scenario.detail
    forward = rates.COMPILED_FORWARD.call_us + 4 * rates.COMPILED_FORWARD.kernel_us
    backward = rates.COMPILED_BACKWARD.call_us + 20 * rates.COMPILED_BACKWARD.kernel_us
    # as in the CUDA-graph what-if: the 10 us after the backward and the dispatch crossing into the next call stay
    per_step = forward + backward + 10.0 + 5.0
    assert gain(summary, "compiled") == pytest.approx((25 * 10.0 + 10.0) / per_step, rel=0.05)


def _serving_loop(between: Callable[[Host], object]) -> dict:
    """A trace of STEPS calls of the model (25 elementwise kernels each), `between` them on the loop's side."""
    gpu = Gpu()
    host = Host(gpu)
    begin = host.t
    for _ in range(STEPS):
        _model_call(host, 25)
        between(host)
    _user_frame(host, begin)
    return trace(host)


def test_a_compiled_inference_loop_pays_the_forwards_costs_only():
    """Without autograd's worker every chain is a forward without a backward (the cheaper compiled call of
    inference): 25 elementwise kernels fuse into one launch; the loop's own 20 us of Python between the
    calls stays."""
    data = _serving_loop(lambda host: host.python(20.0))
    summary = replay(data, steps=STEPS)
    # (and, as in the CUDA-graph what-if, the first launch's dispatch, in the gap that crosses into the call)
    per_step = rates.COMPILED_INFERENCE.call_us + rates.COMPILED_INFERENCE.kernel_us + 20.0 + 5.0
    assert gain(summary, "compiled") == pytest.approx(span_of(data) / (STEPS * per_step), rel=0.05)


def _compiled_calls(call: Callable[[Host], None]):
    """The replay of STEPS calls of `call` on one thread, and its plain-compile what-if."""
    gpu = Gpu()
    host = Host(gpu)
    begin = host.t
    for _ in range(STEPS):
        call(host)
    _user_frame(host, begin)
    summary = replay(trace(host), steps=STEPS)
    return summary, next(s for s in summary.scenarios if s.name == "compiled")


def test_kernels_inductor_already_generated_are_not_fused_again():
    """A model already compiled: its elementwise kernels are Inductor's (``triton_*``), fused as far as
    Inductor would. The plain-compile what-if leaves their GPU time as measured."""
    def call(host: Host) -> None:
        start = host.t
        host.launch(200.0, kernel=GEMM)
        for us, name in ((100.0, "triton_per_fused_native_batch_norm_0"), (60.0, "triton_poi_fused_relu_1")):
            host.launch(us, kernel=name)
        host._x("python_function", "nn.Module: MLP_0", start, host.t - start)

    _, scenario = _compiled_calls(call)
    assert scenario.gpu_busy_us == pytest.approx(STEPS * 360.0, rel=0.01), scenario.detail


def test_a_copy_between_two_elementwise_kernels_keeps_them_apart_under_plain_compile():
    """Inductor fuses elementwise kernels, not a host-to-device copy: per call, kernel, copy, kernel stay
    three launches (counted as one run they would be one)."""
    def call(host: Host) -> None:
        start = host.t
        host.launch(1.0)
        host.copy_htod(1024, 1.0, pageable=False)
        host.launch(1.0)
        host._x("python_function", "nn.Module: MLP_0", start, host.t - start)
        host.python(20.0)

    _, scenario = _compiled_calls(call)
    assert f"{3 * STEPS:,} launches issued as {3 * STEPS:,}" in scenario.detail, scenario.detail


def test_a_fused_run_of_elementwise_kernels_takes_as_long_as_its_longest_member():
    """A busy GPU: per call of the model, a GEMM of 200 us, then cuDNN's batch norm, a ReLU, an add and a
    cast (100, 60, 40 and 80 us: memory-bound work Inductor generates and fuses). Compiled, the four run
    as one kernel as long as the batch norm, the GEMM as measured: 300 us of GPU a call instead of 480.
    The host (10 us a launch) is far ahead of the GPU throughout, so the step is its GPU work."""
    def call(host: Host) -> None:
        start = host.t
        host.launch(200.0, kernel=GEMM)
        for us, name in ((100.0, "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>"),
                         (60.0, "void relu_kernel"), (40.0, "void add_kernel"), (80.0, "void cast_kernel")):
            host.launch(us, kernel=name)
        host._x("python_function", "nn.Module: MLP_0", start, host.t - start)

    summary, scenario = _compiled_calls(call)
    assert scenario.gpu_busy_us == pytest.approx(STEPS * 300.0, rel=0.01), scenario.detail
    assert "as long as its longest kernel" in scenario.detail
    assert gain(summary, "compiled") == pytest.approx(480.0 / 300.0, rel=0.05)
    # the CUDA-graph what-if is launch cost only: the GPU as measured
    graphs = next(s for s in summary.scenarios if s.name == "launch")
    assert graphs.gpu_busy_us == pytest.approx(STEPS * 480.0, rel=0.01), graphs.detail


def _training_with_a_loss_outside_the_model(steps: int, loss_module: bool = False) -> dict:
    """Per step: the model's forward (a module call: a GEMM, then two elementwise kernels), a loss computed
    after it, outside the call (two elementwise kernels), and autograd's worker running the backward of all
    of it in one burst: the loss's two nodes (the loss's sequence numbers), then the model's three."""
    gpu = Gpu()
    main, worker = Host(gpu, tid=1), Host(gpu, tid=2)
    begin = main.t
    for _ in range(steps):
        start = main.t
        main.launch(200.0, kernel=GEMM, sequence=1)
        main.launch(100.0, kernel="void relu_kernel", sequence=2)
        main.launch(60.0, kernel="void add_kernel", sequence=3)
        main._x("python_function", "nn.Module: MLP_0", start, main.t - start)
        loss_start = main.t
        main.launch(50.0, kernel="void pow_kernel", sequence=4)  # the loss, outside the model's call
        main.launch(50.0, kernel="void mean_kernel", sequence=5)
        if loss_module:  # criterion = nn.MSELoss(): a module call of its own, not the model's
            main._x("python_function", "nn.Module: MSELoss_0", loss_start, main.t - loss_start)
        worker.t = main.t
        worker.backward_function("MeanBackward0", 5, 50.0, kernel="void fill_kernel")
        worker.backward_function("PowBackward0", 4, 50.0, kernel="void mul_kernel")
        worker.backward_function("AddBackward0", 3, 60.0, kernel="void add_backward_kernel")
        worker.backward_function("ReluBackward0", 2, 100.0, kernel="void threshold_backward_kernel")
        worker.backward_function("MmBackward0", 1, 200.0, kernel=GEMM)
        main.python(max(0.0, gpu.tail[7] - main.t) + 10)  # blocked in backward() until the GPU is done
    _user_frame(main, begin)
    return trace(main, worker)


@pytest.mark.parametrize("loss_module", [False, True], ids=["functions", "nn.MSELoss"])
def test_the_backward_of_a_loss_computed_outside_the_model_stays_eager_under_plain_compile(loss_module):
    """A busy GPU: the model's forward (a module call: a GEMM, then two elementwise kernels) and a loss
    computed after it, outside the call (two elementwise kernels). Autograd's worker runs the backward of
    all of it in one burst: the loss's two nodes (sequence numbers of the loss's operators), then the
    model's (an elementwise pair, a GEMM). Compiling the model fuses the model's elementwise pairs, forward
    and backward (each pair as long as its longer kernel); the loss, forward and backward, runs as measured:
    GPU per step 200 + 100 + 100 + 100 + 200 + 200 us of 200 + 160 + 100 + 100 + 160 + 200."""
    summary = replay(_training_with_a_loss_outside_the_model(STEPS, loss_module), steps=STEPS)
    scenario = next(s for s in summary.scenarios if s.name == "compiled")
    per_step = 200 + 100 + 50 + 50 + 50 + 50 + 100 + 200  # the loss's four kernels as measured
    assert scenario.gpu_busy_us == pytest.approx(STEPS * per_step, rel=0.01), scenario.detail


def test_the_backward_of_a_loss_computed_outside_the_model_is_in_no_captured_graph():
    """CUDA graphs of the compiled model (mode="reduce-overhead") capture the model's forward and backward,
    not the loss's: every item of the loss's backward keeps its measured host cost and each of its kernels
    its own launch; the model's backward launches are one graph's."""
    timeline = build(trace_events(_training_with_a_loss_outside_the_model(STEPS)))
    assert timeline is not None
    measured = Plan.measured(timeline)
    plan = measured.copy()
    edits.launch(timeline, plan)
    host, ops = timeline.host, timeline.ops
    loss_backward = [i for i in range(len(host)) if host.outside[i]]
    launches = [i for i in loss_backward if host.ops[i]]
    assert [ops[host.ops[i][0]].name for i in launches] == ["void fill_kernel", "void mul_kernel"] * STEPS
    assert [plan.cost[i] for i in loss_backward] == [measured.cost[i] for i in loss_backward]
    assert all(plan.launch_at[host.ops[i][0]] == i for i in launches)
    # the model's backward chain starts at its add_backward launch (the graph's call): the kernels after it
    # are issued by that call
    later = [i for i in range(len(host))
             if host.ops[i] and ops[host.ops[i][0]].name == "void threshold_backward_kernel"]
    assert len(later) == STEPS
    assert all(plan.launch_at[host.ops[i][0]] == i - 2 for i in later)  # the add_backward launch, 2 items before


def test_plain_compile_is_never_combined_with_the_other_what_ifs():
    """An alternative remedy of the launch cause, not a cause of its own: the engine's pairs leave it out."""
    summary = replay(_serving_loop(lambda host: host.data_wait(200.0)), steps=STEPS)
    assert gain(summary, "compiled") > 1.02 and gain(summary, "launch") > 1.02 and gain(summary, "data") > 1.02
    assert "launch+data" in summary.combined or "data+launch" in summary.combined
    assert not any("compiled" in pair for pair in summary.combined)


def test_the_loops_python_after_a_model_call_stays_as_measured():
    """A model call ends 30 us after its last launch, then 495 us of library Python outside it: the
    gap across the call's end is the loop's, and keeps its cost (compiling the model does not remove
    it), where a gap classified by its pieces' made-up start times was dropped (5.7x instead of 1.2x)."""
    gpu = Gpu()
    host = Host(gpu)
    begin = host.t
    for _ in range(STEPS):
        _model_call(host, 25, tail_us=30.0)
        after = host.t
        host.python(495.0)
        host._x("python_function", "torch/utils/helper.py(10): tidy", after, host.t - after)
    _user_frame(host, begin)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    measured = 25 * 10.0 + 30.0 + 495.0
    assert gain(summary, "launch") == pytest.approx(measured / (rates.graph_call_us(25) + 525.0 + 5.0), rel=0.05)


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
    summary = replay(trace(host), steps=STEPS, unprofiled=UnprofiledSteps(step_us=500.0, wait_us=None))
    assert summary.host_scale == pytest.approx(0.5, rel=0.02)
    assert summary.baseline_span_us == pytest.approx(STEPS * 500.0, rel=0.02)
    assert "tracing slowed the host" in summary.calibration


def test_a_gpu_bound_window_is_not_calibrated_by_scaling_the_host():
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.launch(10_000)
    # outside the window the steps were faster for a reason the host cannot explain
    summary = replay(trace(host), steps=STEPS, unprofiled=UnprofiledSteps(step_us=8000.0, wait_us=None))
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
    # per step: 400 copy calls of ~13 us each, 2 us of Python after each, then 3 kernels. Stacked: one
    # copy call from pageable memory, which still waits for its stream: the step before left 130 us of
    # kernels queued (3 x 50 us, the first ready 10 us after the launches began, which took 30 us),
    # then the copy (2 us, and 399 x 256 bytes more at the link's pinned rate) and the call's 4 us
    # return; the user's Python kept (400 x 2 us); the 3 launches
    backlog = 3 * 50.0 + 10.0 - 3 * 10.0
    stacked = backlog + 2.0 + 399 * 256 / rates.PINNED_BYTES_PER_US + 4.0 + 400 * 2.0 + 3 * 10.0
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


def _to_call(host: Host, nbytes: int, *, binding_us: float, dispatch_us: float, call_us: float) -> None:
    """``t.to(device)`` of a pageable tensor as torch makes it and a with_stack trace shows it: the
    builtin's Python binding around the operator, whose dispatch issues cudaMemcpyAsync (returning
    before the copy ran) and then synchronises the stream (the copy lands 5-7 us after the call began)."""
    start = host.t
    host.t += binding_us
    op_start = host.t
    host.t += dispatch_us
    Host.corr += 1
    host.gpu.run(host.t + 5.0, 2.0, Host.corr, kind="gpu_memcpy", name="Memcpy HtoD (Pageable -> Device)",
                 nbytes=nbytes)
    host._x("cuda_runtime", "cudaMemcpyAsync", host.t, call_us, correlation=Host.corr)
    host.t += call_us
    host.sync()
    host.t += dispatch_us
    host._x("cpu_op", "aten::to", op_start, host.t - op_start)
    host.t += binding_us
    host._x("python_function", "<built-in method to of Tensor object at 0x7f0000000000>", start, host.t - start)


def test_a_folded_copy_takes_its_whole_call_and_the_stacked_copy_keeps_one_with_its_sync():
    """400 ``t.to(device)`` of 256 bytes a step in the user's loop (with_stack): each call is 2 x 1.5 us of
    Python binding, 2 x 4 us of dispatch, a 3 us cudaMemcpyAsync and a sync that returns 4 us after the
    copy; the user's loop takes 0.5 us a tensor. Two 150 us kernels queued before the loop (the step's
    own work, which ends a run) hold the stream. Stacked: one call, whose sync still waits for them."""
    gpu = Gpu()
    host = Host(gpu)
    begin = host.t
    for _ in range(STEPS):
        host.launch(150.0)  # the step's own work, queued before its copies
        host.launch(150.0)
        for _ in range(400):
            _to_call(host, 256, binding_us=1.5, dispatch_us=4.0, call_us=3.0)
            host.python(0.5)
    _user_frame(host, begin)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    scenario = next(s for s in summary.scenarios if s.name == "small_copies")
    assert scenario.changed == STEPS * 399
    assert "the framework's Python around it" in scenario.detail
    # per step, stacked: two launches (10 us each); then one call: 1.5 us of binding, 4 us of dispatch, the
    # 3 us copy call, its sync waiting for the kernels (the first ready 10 us after the launches began)
    # and the copy (2 us, and 399 x 256 bytes more at the link's pinned rate) + 4 us, 4 + 1.5 us more;
    # the user's 400 x 0.5 us of Python
    copy_end = 10.0 + 300.0 + 2.0 + 399 * 256 / rates.PINNED_BYTES_PER_US
    stacked = copy_end + 4.0 + 4.0 + 1.5 + 400 * 0.5
    measured = span_of(data) / STEPS
    assert gain(summary, "small_copies") == pytest.approx(measured / stacked, rel=0.02)


def test_the_copies_trace_folds_each_tiny_copy_with_its_call_and_keeps_one_sync_per_run():
    """The H200 copies trace (tests/fixtures/h200/traces/copies.json.gz, with_stack): 49 copies of 400
    bytes a step after a 38 MB pinned copy. Folded, each takes its dispatch, sync and Python binding;
    the user's loop stays; each run's first copy keeps its sync, which waits for the pinned copy."""
    from pathlib import Path

    from gpudoctor.collectors.trace_decode import read_trace
    from gpudoctor.replay import edits
    from gpudoctor.replay.simulate import Plan
    from gpudoctor.replay.timeline import CPU, DISPATCH, PYTHON, SYNC, USER

    timeline = build(read_trace(Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "traces" /
                                "copies.json.gz"))
    assert timeline is not None and timeline.stacks
    plan = Plan.measured(timeline)
    changed, _ = edits.small_copies(timeline, plan)
    assert changed == 245
    host = timeline.host
    folded = [i for i in range(len(host)) if host.ops[i] and plan.cost[i] == 0 and not plan.blocks[i]
              and all(plan.dur[j] == 0 for j in host.ops[i])]
    assert len(folded) == 245
    first_fold, last_fold = folded[0], folded[48]  # the first run: its 2nd to 50th copies
    inside = range(first_fold - 8, last_fold)
    framework = [i for i in inside if host.kind[i] == CPU and host.tag[i] in (PYTHON, DISPATCH)]
    assert framework and all(plan.cost[i] == 0 for i in framework)
    users = [i for i in inside if host.kind[i] == CPU and host.tag[i] == USER]
    assert users and all(plan.cost[i] == host.dur[i] for i in users)
    blocking = [i for i in range(first_fold - 8, last_fold) if host.kind[i] == SYNC and plan.blocks[i]]
    assert len(blocking) == 1 and host.dur[blocking[0]] > 600  # the run's own sync: it waits for the pinned copy


def _pageable_steps(nbytes: int, rest: Callable[[Host], object]) -> dict:
    """STEPS steps of a blocking ``.to("cuda")`` of NBYTES from pageable memory (at 8 GB/s) and a 700 us
    kernel, then REST of the step."""
    host = Host(Gpu())
    for _ in range(STEPS):
        host.to_device(nbytes, nbytes / 8.0e3)
        host.launch(700.0)
        rest(host)
    return trace(host)


def test_a_blocking_to_from_pageable_memory_made_pinned_lets_the_host_run_on_with_the_step():
    """Issue 25 (syn_pageable_copies on an H200): ``x = host.to("cuda")`` of 256 MiB from pageable memory
    (33 ms at 8 GB/s), then 2.5 ms of the step's Python and two 700 us kernels. torch's blocking ``.to()``
    stages the copy through the driver (the call lasts the copy) and then synchronises the stream. Pinned
    and ``non_blocking=True``, the call costs a launch and no synchronisation is made: the host queues the
    step's work while the copy runs, so a step takes its GPU time, the copy at the pinned rate plus the
    kernels (6.25 ms), not the copy and then the host's 2.5 ms (7.4 ms: the model kept the copy's
    stream synchronisation blocking, 4.3x predicted against 8.3x realized)."""
    nbytes = 256 * 2**20
    data = _pageable_steps(nbytes, lambda host: (host.launch(700.0), host.python(2500.0)))
    summary = replay(data, steps=STEPS)
    per_step = nbytes / rates.PINNED_BYTES_PER_US + 2 * 700.0  # GPU-bound: the host needs about 2.5 ms a step
    first = 5.0 + 5.0  # the first copy's dispatch, then a launch's latency on an idle GPU
    assert gain(summary, "pinned") == pytest.approx(span_of(data) / (first + STEPS * per_step), rel=0.01)


def test_a_pinned_copy_is_ready_a_launch_latency_after_its_call_not_after_the_staging_began():
    """A pageable copy's DMA begins only once the driver has staged its first chunk (150 us after the
    call here). Pinned, the copy is queued like a kernel: ready the trace's launch latency (5 us, its
    kernels' median) after its call. With a read-back ending each step (``loss.item()``, which stays)
    the step is serial, so the 145 us show. A step: a kernel's launch (5 + 5, its 20 us kernel done
    long before the copy), 100 us of Python, the ``.to()`` (5 of dispatch, the call at a launch's 5 us,
    its 2 + 5 of dispatch; the copy ready 5 us after the call, t = 120), the kernel queued behind the
    copy (100 us), the read's 1 us copy and its sync waking 4 us after it, and the read's 5 of dispatch."""
    nbytes = 4 * 2**20
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.launch(20.0)
        host.python(100.0)
        host.to_device(nbytes, nbytes / 8.0e3)
        host.launch(100.0)
        host.item()
    data = trace(host)
    assert build(trace_events(data)).launch_latency_us == pytest.approx(5.0)
    summary = replay(data, steps=STEPS)
    per_step = 120 + nbytes / rates.PINNED_BYTES_PER_US + 100 + 1 + 4 + 5
    assert gain(summary, "pinned") == pytest.approx(span_of(data) / (STEPS * per_step), rel=0.01)


def test_a_sync_of_the_users_own_after_a_pageable_copy_stays():
    """Only the copy operator's own stream synchronisation goes: one the user's code makes after
    some Python of its own (``torch.cuda.synchronize()`` to time the step) still waits for the copy."""
    nbytes = 256 * 2**20
    data = _pageable_steps(nbytes, lambda host: (host.python(50.0), host.sync(), host.python(2500.0)))
    timeline = build(trace_events(data))
    assert timeline is not None
    known = edits.facts(timeline)
    assert len(known.own_syncs) == STEPS and all(i >= 0 for i in known.own_syncs)
    user_syncs = [i for i in known.syncs if i not in known.own_syncs]
    assert len(user_syncs) == STEPS
    summary = replay(data, steps=STEPS)
    # serial again: the dispatch, the copy (ready the trace's launch latency after its call), the kernel,
    # the sync's wake-up, then the host's 2.5 ms and the next copy's 5 us of dispatch (the window ends
    # with the last sync)
    latency = timeline.launch_latency_us
    per_step = 5.0 + latency + nbytes / rates.PINNED_BYTES_PER_US + 700.0 + 4.0 + 2500.0
    assert gain(summary, "pinned") == pytest.approx(span_of(data) / (STEPS * per_step - 2500.0), rel=0.01)


def _tiny_copies_window(teardown_us: float) -> dict:
    """STEPS steps of the corpus's syn_tiny_copies shape in a with_stack window: each step's own work (two
    150 us kernels) inside its ``Optimizer.step#`` range, then 400 ``t.to(device)`` of 256 bytes in the user's
    loop. The window closes as gpudoctor closes it, from a hook inside the next ``optimizer.step()``: the
    agent's frame (20 us), then the profiler stops. The tracer closes the Python frames still open (the
    user's ``main``) at the stop; the ``Optimizer.step#`` range still open is closed when the trace is
    collected, `teardown_us` later (65.8 ms after the 28-step window of the H200 corpus run)."""
    gpu = Gpu()
    host = Host(gpu)
    begin = host.t
    for _ in range(STEPS):
        start = host.t
        host.launch(150.0)
        host.launch(150.0)
        host._x("user_annotation", "Optimizer.step#SGD.step", start, host.t - start)
        for _ in range(400):
            _to_call(host, 256, binding_us=1.5, dispatch_us=4.0, call_us=3.0)
            host.python(0.5)
    closing = host.t
    host.t += 20.0
    host._x("python_function", "gpudoctor/agent/profiler.py(419): stop", closing, host.t - closing)
    _user_frame(host, begin)
    host._x("user_annotation", "Optimizer.step#SGD.step", closing, host.t + teardown_us - closing)
    return trace(host)


def test_the_profilers_teardown_after_a_window_closed_inside_optimizer_step_is_not_the_steps():
    """Issue 25 (syn_tiny_copies, 4.64x predicted, 8.23x realized): gpudoctor stops its profiler inside
    ``optimizer.step()``, whose ``Optimizer.step#`` range the trace then closes at its collection, after
    every event of the window. Its tail (the profiler's teardown, no event in it) became one CPU item of
    the main thread: in the base and, whole, in every what-if, so a remedy that takes most of the step
    away was predicted far short. The replay ends the thread at its last event."""
    closed = _tiny_copies_window(teardown_us=0.0)
    torn = _tiny_copies_window(teardown_us=50_000.0)
    assert max(e["ts"] + e["dur"] for e in torn["traceEvents"]) - span_of(closed) == pytest.approx(50_000.0)
    summary = replay(torn, steps=STEPS)
    assert summary.measured_span_us == pytest.approx(span_of(closed), rel=1e-9)
    assert summary.baseline_span_us == pytest.approx(span_of(closed), rel=1e-9)
    # per step, stacked (as in the test above): the two launches (10 us each), one .to() whose sync waits
    # for the step's kernels and the copy with every byte, 4 us to return, 4 + 1.5 us more; the user's
    # 400 x 0.5 us of Python. Then the agent's 20 us, once
    copy_end = 10.0 + 300.0 + 2.0 + 399 * 256 / rates.PINNED_BYTES_PER_US
    stacked = copy_end + 4.0 + 4.0 + 1.5 + 400 * 0.5
    assert gain(summary, "small_copies") == pytest.approx(span_of(closed) / (STEPS * stacked + 20.0), rel=0.02)
    assert gain(summary, "small_copies") > 15.0  # the teardown kept in both spans said 2.6x


def test_the_profilers_teardown_does_not_enter_the_calibration():
    """Calibrated to the unprofiled step time, the window closed inside ``optimizer.step()`` replays as the
    same window closed at once: the same host scale (the teardown is no host cost to scale down) and the
    same predictions."""
    closed = _tiny_copies_window(teardown_us=0.0)
    torn = _tiny_copies_window(teardown_us=50_000.0)
    step_us = 0.6 * span_of(closed) / STEPS
    reference = replay(closed, steps=STEPS, unprofiled=UnprofiledSteps(step_us=step_us, wait_us=None))
    summary = replay(torn, steps=STEPS, unprofiled=UnprofiledSteps(step_us=step_us, wait_us=None))
    assert reference.host_scale < 1.0 and "tracing slowed the host" in reference.calibration
    assert summary.host_scale == pytest.approx(reference.host_scale, rel=1e-9)
    assert summary.baseline_span_us == pytest.approx(STEPS * step_us, rel=0.02)
    assert {s.name: s.span_us for s in summary.scenarios} == pytest.approx(
        {s.name: s.span_us for s in reference.scenarios}, rel=1e-9)


def test_a_range_that_ends_the_window_without_stacks_stays_as_recorded():
    """Without Python stacks nothing tells a range the profiler's stop closed from the thread's own last
    wait (a DataLoader wait ending the window, a ``ProfilerStep#`` closed by ``prof.step()``): it stays."""
    gpu = Gpu()
    host = Host(gpu)
    for _ in range(STEPS):
        host.launch(100.0)
        host.data_wait(2000.0)
    start = host.t
    host.launch(100.0)
    host._x("user_annotation", "Optimizer.step#SGD.step", start, host.t - start + 5_000.0)
    data = trace(host)
    summary = replay(data, steps=STEPS)
    assert summary.measured_span_us == pytest.approx(span_of(data), rel=1e-9)


def _per_parameter_adam_window(update: str) -> dict:
    """STEPS steps in a with_stack window: the model's one 50 us kernel, then ``optimizer.step()`` as
    torch.optim runs it: its wrapper's Python (20 us), ``_init_group``'s loop over the parameters
    (300 us of Python, no launch), then the update function `update` launching 100 kernels of 1 us
    (10 us of host each)."""
    gpu = Gpu()
    host = Host(gpu)
    begin = host.t
    for _ in range(STEPS):
        host.launch(50.0)
        step = host.t
        host.python(20.0)
        init = host.t
        host.python(300.0)
        host._x("python_function", "torch/optim/adam.py(139): _init_group", init, 300.0)
        body = host.t
        for _ in range(100):
            host.launch(1.0)
        host._x("python_function", update, body, host.t - body)
        host._x("python_function", "torch/optim/optimizer.py(512): wrapper", step, host.t - step)
        host._x("user_annotation", "Optimizer.step#AdamW.step", step, host.t - step)
    _user_frame(host, begin)
    return trace(host)


def test_a_fused_optimizer_replaces_the_update_function_and_keeps_the_rest_of_step():
    """torch.optim's step() runs its wrapper, its hooks and ``_init_group`` (a Python loop over the
    parameters) whether it then dispatches to the per-parameter, foreach or fused update: the what-if
    chains the update function's launches and keeps the rest as measured. Before, the whole step was
    chained, ``_init_group`` and the wrapper with it (8.2x here instead of 4.0x)."""
    data = _per_parameter_adam_window("torch/optim/adam.py(347): _single_tensor_adam")
    summary = replay(data, steps=STEPS)
    # per step on the host: the model's launch (5 + 5 us), the wrapper (20), _init_group (300), the
    # chain's first launch call (5); on the GPU 50 + 100 x 1.13 us: the host sets the pace, and the last
    # chain's kernels end the window (the launch latency, then back to back at the graph rate)
    per_step = 10.0 + 20.0 + 300.0 + 5.0
    tail = 5.0 + 100 * rates.GRAPH_KERNEL_US
    assert gain(summary, "optimizer") == pytest.approx(span_of(data) / (STEPS * per_step + tail), rel=0.01)
    scenario = next(s for s in summary.scenarios if s.name == "optimizer")
    assert "_init_group" in scenario.detail and "as measured" in scenario.detail
    # the step is no chain of compile's what-if (its one model launch a step chains with nothing)
    assert gain(summary, "launch") is None


def test_without_torch_optims_update_frame_the_whole_step_is_what_a_fused_optimizer_replaces():
    """An optimizer whose update function is not torch.optim's (nothing tells its parts apart): the whole
    step is chained, its framework Python with it, as before."""
    data = _per_parameter_adam_window("my_optim.py(40): update")
    summary = replay(data, steps=STEPS)
    # per step on the host: the model's launch and the chain's first launch call; the GPU's 50 us kernel
    # and 100 kernels at the graph rate set the pace
    per_step = 50.0 + 100 * rates.GRAPH_KERNEL_US
    assert gain(summary, "optimizer") == pytest.approx(span_of(data) / (STEPS * per_step), rel=0.05)
