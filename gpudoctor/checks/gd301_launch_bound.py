"""GD301 launch-bound: many tiny kernels, and the GPU idles between them.

What it detects
    The profiled window holds many kernels that are shorter than the CPU call that
    launches them, and the GPU sits idle a large share of the time between its first
    and last kernel. Each kernel costs the host a launch (a few microseconds of
    Python, dispatcher and driver work); when kernels finish faster than the host can
    queue the next ones, the queue never fills and the GPU waits for the CPU. Typical
    causes: long chains of elementwise ops on small tensors, per-parameter optimizer
    loops, small batches, Python loops over layers or timesteps.

Why it matters
    In a launch-bound run the GPU's speed hardly matters: the step takes as long as
    the host needs to issue its launches. A bigger GPU, or a bigger batch on the same
    number of kernels, changes little; fewer, larger kernels change everything.

How it is measured
    From the torch.profiler window (kernels, CUDA launch calls, correlation ids):

    - short kernels: GPU time below the CPU time of its own launch call, that call
      taking at most 50 us (Holistic Trace Analysis' kernel launch statistics);
    - GPU idle share: time with no kernel, copy or memset on any stream between the
      first and last GPU activity, over that whole span;
    - launch-attributable idle: gaps shorter than 30 us between work that was queued
      in time (HTA's kernel-to-kernel delay) plus gaps where the host queued the next
      work only after the GPU had run dry (HTA's host wait), minus the gaps that
      follow a host synchronisation (GD302 counts those);
    - median kernel duration, launches per step (per second in a window without
      steps) and the mean CPU cost of a launch.

    A run with several profiled windows (a training and an evaluation phase) is checked
    in each; the finding says which window it comes from, and when it holds only there.

Thresholds, and where they come from
    - at least {{MIN_KERNELS}} kernels in the window: fewer give no distribution to judge;
    - tiny-kernel evidence, any of: at least {{SHORT_SHARE}} of the kernels are short (half of
      the work drains faster than it is queued); the median kernel is below {{TINY_MEDIAN_US}}
      (launch cost is typically 5-20 us: HTA); the median kernel is shorter than the
      mean launch call;
    - GPU idle share >= {{IDLE_WARNING}} to look at all (the TensorBoard profiler plugin calls a
      GPU under 50% busy under-used).
    - severity by the predicted gain ({{GAIN_WARNING}} warning, {{GAIN_CRITICAL}} critical, below it a
      note). The gain is the step time now over the step time with each chain of
      launches issued as one captured graph: the profiled window replayed with the
      host cost of one ``torch.compile(mode="reduce-overhead")`` call per chain in
      place of its operators, their dispatch and the framework's Python between them
      (117 us + 0.31 us a kernel, measured on an H100 host: its guards, the CUDA-graph
      tree, the replay's launch), the graph starting once that call's host work is done;
      where the trace's Python stacks show the model's calls (outermost ``nn.Module``
      frames) each call is one chain and what runs outside them stays as measured, else the
      user's own Python, data waits and blocking calls end a chain; the kernels back to
      back at the graph rate measured on an H200 (1.13 us per tiny kernel). Before the
      compiled call's cost was counted (one launch call per chain, the whole window one
      chain where nothing broke it) the replay said 5.62x for a batch-1 inference loop that
      realized 3.19x on an H100, 1.73x for a Python-bound loop that plain torch.compile took
      to 1.15x; then 2.02x and 1.06x (1.00x since a loss's backward stays eager). The
      backward, run on autograd's thread while the loop waits, is one compiled call more.
      Launch cost only: what fusion saves on the GPU is in ``compiled_gain`` below. Never
      more than a host-side fix can buy while the GPU was busy. Without a replay: span /
      (span - launch-attributable idle).
    - plain ``torch.compile`` (no CUDA graphs) gets its own number, the evidence
      ``compiled_gain`` (replay scenario ``compiled``): the same chains as compiled calls
      that still launch kernel by kernel, a run of kernels other than matrix multiplies,
      convolutions and attention launched as one (what Inductor fuses), each kernel and
      each call at the host costs measured on an H100 host with torch 2.11 (a training
      forward 453 us a call more than eager and 10.4 us a kernel, its backward under
      autograd's engine 17.2 us a kernel as eager, a forward without autograd 17.8 us a
      call and 12.1 us a kernel), each fused run on the GPU as long as its longest kernel
      (GD306 gives the same number where the GPU is busy). It does not set the severity.
      On the corpus: a 24-layer Linear training loop 1.00x against 1.08x realized
      (H100), timm's ViT inference 3.05x against 2.87x (H200); the CUDA-graph number
      said 3.18x and 2.93x. A loss computed outside the model is not compiled with it:
      its backward stays eager in both what-ifs (the 24-layer loop's CUDA-graph number
      2.91x against 2.81x realized).
    Measured on an H200: 300 chained elementwise ops on a 256-element tensor per
    step gave 4,500 kernels with a median of 0.96 us against 4.1 us of CPU per
    launch; every kernel was short and the GPU idled 91% of its span.

What to do
    Fuse the kernels and take the host out of the loop: ``torch.compile`` merges
    chains of elementwise ops into a few generated kernels; ``mode="reduce-overhead"``
    adds CUDA graphs, which replay a whole step's launches with one call (static
    shapes). A larger batch amortises each launch over more samples. The optimizer's
    own launches are not in this finding's number (its replay leaves ``optimizer.step()``
    as measured): a per-parameter optimizer is GD305's, with its own replay. Where the
    update is already a few multi-tensor kernels (torch's foreach default on CUDA), a
    fused optimizer leaves the step's launches as they are: the DDP tutorial's SGD
    (one ``_foreach_add_`` a step) was once scored against this finding's 2.44x and
    realized 1.31x on an H200 (pairs of 1.16x and 1.47x).

Example
    Bad: a Python loop of small elementwise ops, one launch each::

        for t in range(seq_len):
            h = torch.tanh(x[:, t] @ w_x + h @ w_h + b)

    Good: compiled (and graph-captured) so the step issues a handful of launches::

        step = torch.compile(model, mode="reduce-overhead")
        loss = step(x).sum()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis.prediction import SEVERITY_GAINS, predict, severity_for
from gpudoctor.checks._profile import (
    LAUNCH_LIMITS,
    MAX_GAIN,
    gpu_profile,
    launch_signals,
    per_window,
    window_name,
    window_seconds,
)
from gpudoctor.model import Evidence, Finding, Fix, Remedy, check

if TYPE_CHECKING:
    from gpudoctor.session import Session

REMEDY = Remedy(
    text="Take the host out of the loop: torch.compile(model, mode=\"reduce-overhead\") captures each call's "
    "launches as a CUDA graph that replays at once (static shapes); the predicted gain is for this. Plain "
    "torch.compile(model) fuses elementwise chains but still launches every kernel from the host, every matrix "
    "multiply and convolution on its own, and in training its backward is still run by autograd's engine: the "
    "finding gives its own number for it (compiled_gain), which can be far below the CUDA-graph one (1.08x "
    "realized against 2.81x on a 24-layer Linear training loop on an H100). Measure either with "
    "`--try-only compile=inductor`. Where memory allows, a larger batch makes each launch do more work. (The "
    "optimizer's own launches are not in this number: GD305 names a per-parameter optimizer.)",
    code="model = torch.compile(model, mode=\"reduce-overhead\")   # CUDA graphs: one launch per step (predicted)\n"
    "model = torch.compile(model)                            # fused kernels, launched one by one (compiled_gain)",
)


def _run(session: Session) -> list[Finding]:
    profile = gpu_profile(session)
    signals = launch_signals(profile)
    if not signals.launch_bound:
        return []
    span, idle_share, short_share = signals.span_us, signals.idle_share, signals.short_share
    median, mean_launch = signals.median_us, signals.mean_launch_us
    # gaps after a sync belong to GD302: counting them here too would promise the same gain twice
    host_wait = max(0.0, profile.idle_gap_host_wait_us - profile.idle_after_sync_us)
    attributable = min(profile.idle_gap_kernel_to_kernel_us + host_wait, span * 0.999)
    rule = min(MAX_GAIN, span / (span - attributable)) if 0 < attributable < span else 1.0
    prediction = predict(session, "launch", host_side=True, rule_gain=rule,
                         rule_detail="span / (span - launch-attributable idle) of the profiled window")
    gain = prediction.gain if prediction is not None else rule
    # plain torch.compile (no CUDA graphs) is another remedy with its own number: kernels still launched
    # one by one by the compiled code, the backward still run by autograd's engine
    compiled = predict(session, "compiled", host_side=False) if prediction is not None else None
    if compiled is not None and compiled.method == "rule":
        compiled = None
    severity = severity_for(gain)
    window = window_name(profile)
    evidence = {
        "kernel_count": Evidence(profile.kernel_count, "kernels", window, "kernels"),
        "short_kernel_share": Evidence(round(short_share * 100, 1), "%", window,
                                       "kernels shorter than their own launch call"),
        "gpu_idle_share": Evidence(round(idle_share * 100, 1), "%", window,
                                   "GPU idle between its first and last activity"),
        "idle_kernel_to_kernel": Evidence(round(profile.idle_gap_kernel_to_kernel_us / 1e3, 3), "ms", window,
                                          "idle in gaps < 30 us (launch delay)"),
        "idle_host_wait": Evidence(round(profile.idle_gap_host_wait_us / 1e3, 3), "ms", window,
                                   "idle while the host was late to queue work"),
    }
    if compiled is not None:
        evidence["compiled_gain"] = Evidence(
            round(compiled.gain, 2), "x", window,
            f"predicted with plain torch.compile(model), no CUDA graphs ({compiled.method})")
    if median is not None:
        evidence["kernel_median"] = Evidence(round(median, 2), "us", window, "median kernel duration")
    if mean_launch is not None:
        evidence["launch_mean"] = Evidence(round(mean_launch, 2), "us", window, "mean CPU time of a launch call")
    per_step = ""
    if profile.steps and profile.launch_count:
        launches = profile.launch_count / profile.steps
        evidence["launches_per_step"] = Evidence(round(launches, 1), "launches/step", window,
                                                 "kernel launches per step")
        per_step = f" The host issued {launches:,.0f} launches per step."
    elif profile.launch_count and window_seconds(profile):
        rate = profile.launch_count / (window_seconds(profile) or 1.0)
        evidence["launches_per_second"] = Evidence(round(rate), "launches/s", window,
                                                   "kernel launches per second (the window has no steps)")
        per_step = f" The host issued {rate:,.0f} launches per second."
    lead = ("gpu_idle_share", "short_kernel_share", "kernel_median")  # shown first: the report's key numbers
    evidence = {**{k: evidence[k] for k in lead if k in evidence}, **evidence}
    numbers = [f"median kernel {median:.1f} us"] if median is not None else []
    if mean_launch is not None:
        numbers.append(f"mean launch {mean_launch:.1f} us of CPU")
    detail = f" ({', '.join(numbers)})" if numbers else ""
    message = (
        f"The GPU was idle {idle_share:.0%} of the time between its first and last kernel in the {window}, "
        f"and {short_share:.0%} of its {profile.kernel_count:,} kernels ran shorter than their own launch "
        f"call{detail}.{per_step} The host cannot queue work as fast as the GPU finishes it."
        + (f" Predicted: {prediction.sentence()}." if prediction is not None else "")
        + (f" Plain torch.compile(model), whose compiled code still launches each kernel from the host: "
           f"{compiled.gain:.2f}x predicted ({compiled.method})." if compiled is not None else "")
    )
    title = "Launch-bound: many tiny kernels, the GPU waits for the CPU"
    if severity == "info":
        title = "Many tiny kernels, but launching them costs the step little"
    return [Finding(severity=severity, title=title, message=message, evidence=evidence, remedy=REMEDY,
                    prediction=prediction, estimated_gain=gain)]


# a launch-bound loop is what pegs its main thread
run = check("GD301", "launch-bound", stage=3, title="Launch-bound (many tiny kernels)",
            requires=("profile",), explains=("GD201", "GD103"),
            thresholds=(*LAUNCH_LIMITS, *SEVERITY_GAINS),
            fix=Fix("compile", sizes=True, scenarios=("launch", "compiled")))(per_window(_run))
