"""GD306 unfused-kernels: a busy GPU spends its time in elementwise work a compiler would fuse.

What it detects
    The GPU is busy (an idle one waits for its host: GD301 covers a launch-bound window and
    gives its own number for torch.compile), but much of its time goes to chains of small
    memory-bound kernels between the matrix multiplies and convolutions: batch norm,
    activations, residual adds, dropout, layer norm, casts. Each reads its input from
    memory and writes its output back; a chain of five reads and writes the same
    tensor five times.

Why it matters
    Such kernels run at memory bandwidth, not at the tensor cores' rate: their time is
    the bytes they move. ``torch.compile`` (Inductor) generates one kernel for each run
    of them, which reads the inputs once and writes the outputs once, so the run costs
    about what its largest member cost. The matrix multiplies and convolutions stay
    library calls and take as long as before. The step shrinks by what the chains
    cost beyond their longest kernel.

How it is measured
    From the profiled window and its replay (gpudoctor.replay, scenario ``compiled``):
    each chain of launches the CUDA-graph what-if takes as one graph becomes one
    compiled call that still launches kernel by kernel, at the host costs measured for
    compiled code (rates.COMPILED_*); a run of kernels other than matrix multiplies,
    convolutions and attention (cuDNN's batch norm included: Inductor decomposes norms
    and generates their kernels) becomes one kernel as long as its longest member;
    copies and memsets stay as measured. The window is re-simulated; the gain is the
    step time now over the replayed one. Where the host queued its steps far ahead of
    the GPU a step takes its GPU time, and the gain is the GPU work now over the GPU
    work fused.

    The longest member is a floor on what one pass over the chain's largest tensor
    costs; Inductor may also change the layouts the convolutions run in, which this
    does not count: timm's ResNet-50 training at batch 64 in fp32 (TF32 convolutions)
    realized 1.57x with ``torch.compile`` on an H100, where this what-if says 1.26x.
    Autograd's engine runs the backward of the model and of what the script computes
    outside it (a loss) in one burst; compiling the model leaves the loss's backward
    eager, so the what-if does too: each backward function whose forward operator (the
    same autograd sequence number in the trace) ran outside the model's calls stays as
    measured. Before it told them apart, a bf16 Linear stack whose loss
    (``.float().square().mean()``) was as large as its own elementwise work was
    predicted 1.07x and realized 1.01x (H100); now 1.00x.

Thresholds, and where they come from
    - at least {{MIN_KERNELS}} kernels in the window, and the GPU idle less than {{IDLE_WARNING}} of
      the span between its first and last work (the line GD301 looks from: an idle GPU waits
      for its host, and what compiling buys there is GD301's number, not this one);
    - severity by the predicted gain ({{GAIN_WARNING}} warning, {{GAIN_CRITICAL}} critical, below
      it nothing is said): the same lines as every other finding.

What to do
    Compile the model: ``model = torch.compile(model)``. Measure it with
    ``--try-only compile=inductor``. Bf16 autocast (GD304) halves the bytes these
    kernels move as well, and combines with compiling.

Example
    Bad: a conv net trained eagerly, each batch norm, ReLU and residual add its own
    kernel::

        model = torchvision.models.resnet50().cuda()

    Good: the chains between the convolutions fused by Inductor::

        model = torch.compile(torchvision.models.resnet50().cuda())
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis.prediction import GAIN_WARNING, SEVERITY_GAINS, predict, replay_of, severity_for
from gpudoctor.checks._profile import IDLE_WARNING, MIN_KERNELS, gpu_profile, launch_signals, per_window, window_name
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check

if TYPE_CHECKING:
    from gpudoctor.session import Session

REMEDY = Remedy(
    text="Compile the model: torch.compile(model) generates one kernel for each chain of elementwise work "
    "between the matrix multiplies and convolutions (norms, activations, residual adds), which moves each "
    "tensor through memory once. Measure it with `--try-only compile=inductor`.",
    code="model = torch.compile(model)",
)


def _run(session: Session) -> list[Finding]:
    profile = gpu_profile(session)
    if launch_signals(profile).idle_share >= IDLE_WARNING:
        # an idle GPU waits for its host: GD301's finding where its kernels are tiny (it gives plain
        # torch.compile's number as its compiled_gain), the input pipeline's or the syncs' otherwise
        return []
    replay = replay_of(session)
    if replay is None:
        raise Skip("no replay of a profiled window (the fused kernels' time is read from it)")
    scenario = next((s for s in replay.scenarios if s.name == "compiled"), None)
    if scenario is None:
        return []  # no launch chain with kernels to fuse
    prediction = predict(session, "compiled", host_side=False)
    if prediction is None or prediction.method != "replay" or prediction.gain < GAIN_WARNING:
        return []
    window = window_name(profile)
    now_ms = (replay.baseline_gpu_busy_us or 0.0) / 1e3
    fused_ms = scenario.gpu_busy_us / 1e3
    evidence = {
        "compiled_gain": Evidence(round(prediction.gain, 2), "x", window,
                                  "predicted with plain torch.compile(model), no CUDA graphs (replay)"),
        "gpu_busy_now": Evidence(round(now_ms, 2), "ms", window, "GPU busy in the replayed window as measured"),
        "gpu_busy_fused": Evidence(round(fused_ms, 2), "ms", window,
                                   "GPU busy with each run of elementwise kernels fused into one"),
    }
    saved = f"{now_ms - fused_ms:,.1f} ms of its {now_ms:,.1f} ms of GPU work" if now_ms > fused_ms else "little"
    message = (f"The GPU spends its time in chains of elementwise kernels between the matrix multiplies and "
               f"convolutions of the {window}. Fusing each chain into one kernel, as torch.compile does, saves "
               f"{saved}: the replay predicts {prediction.sentence()}.")
    return [Finding(severity=severity_for(prediction.gain),
                    title="Elementwise kernels a compiler would fuse take much of the GPU's time",
                    message=message, evidence=evidence, remedy=REMEDY, prediction=prediction,
                    estimated_gain=prediction.gain)]


run = check("GD306", "unfused-kernels", stage=3, title="Unfused elementwise kernels on a busy GPU",
            requires=("profile",), explains=("GD201",),
            thresholds=(MIN_KERNELS, IDLE_WARNING, *SEVERITY_GAINS),
            fix=Fix("compile", scenarios=("compiled",)))(per_window(_run))
