"""GD304 fp32-matmul: matrix multiplies run in full fp32 where tensor cores would serve.

What it detects
    A significant share of the GPU's kernel time goes to matrix-multiply (GEMM)
    kernels that run in plain fp32 on the CUDA cores (cuBLAS ``sgemm``, CUTLASS
    ``simt``, xmma ``f32f32_f32f32`` / ``ffma`` kernels) rather than on tensor cores
    (TF32, bf16, fp16: kernel names with ``tf32``, ``bf16``, ``h884``, ``s16816``,
    ``tensorop``, ``wgmma``, cuBLASLt's ``nvjet``). PyTorch computes fp32 matmuls in
    full fp32 by default: ``torch.backends.cuda.matmul.allow_tf32`` is False unless
    you set it (or ``torch.set_float32_matmul_precision("high")``).

Why it matters
    On Ampere and newer GPUs the tensor cores run TF32 matmuls about 8x faster than
    fp32 on the CUDA cores at peak (A100: 156 vs 19.5 TFLOP/s; H100 SXM: about 495 vs
    67) and bf16/fp16 about twice TF32 again. TF32 keeps fp32's range with a 10-bit
    mantissa, which most training tolerates; bf16 autocast is the usual choice for
    new models.

How it is measured
    Each kernel in the torch.profiler window is classified by its name: GEMM kernels
    (``gemm``/``gemv``/``nvjet``/``wgmma``, convolutions excluded) are tensor-core when
    the name carries a 16/8-bit or TF32 type or a tensor-core instruction family, fp32
    when it carries ``sgemm``/``simt``/``ffma``/``float``, and unknown otherwise. TF32
    is reported as enabled when the agent read ``allow_tf32`` in the workload, or
    when a TF32 kernel ran.

Thresholds, and where they come from
    - fp32 GEMM time >= {{SHARE_INFO}} of all kernel time: a finding (info): the matmuls
      themselves would speed up.
    - fp32 GEMM time >= {{SPAN_WARNING}} of the GPU span (first to last activity, idle included)
      for a warning; a GPU that mostly waits for the host gains little from faster
      matmuls. Severity above that follows the predicted gain ({{GAIN_CRITICAL}} critical).
    The gain: the profiled window replayed with each fp32 GEMM kernel at the TF32
    rate measured on an H200 for a kernel of its duration (1.33x for a 28 us kernel,
    2.2x at 73 us, 5.4x at 358 us, 7.45x at 2.7 ms, 7.8x at 22 ms: short GEMMs are bound
    by memory, not by the math). Without a replay, Amdahl with the GEMMs {{TENSOR_CORE_SPEEDUP}} faster (the TF32:fp32
    peak ratio of the A100 and H100): 1 / ((1 - f) + f / 8), f = fp32 GEMM time / span. Measured on an
    H200, one 4096x4096x4096 matmul: 2.68 ms in fp32 (sm80_xmma_gemm_f32f32_..._ffma),
    0.34 ms in TF32 (sm90_xmma_gemm_f32f32_tf32f32), 0.17 ms in bf16 (nvjet_sm90_tst).

What to do
    Allow TF32 for fp32 matmuls (and keep it for convolutions, the default), or run
    the forward pass under bf16 autocast. Check accuracy on a validation run; both are
    standard for training on Ampere and newer GPUs. Pre-Ampere GPUs have no TF32:
    there fp16 autocast with a GradScaler is the tensor-core path.

Example
    Bad: the default, full fp32 matmuls::

        logits = model(x)            # fp32 weights and activations -> sgemm kernels

    Good: TF32, or bf16 autocast::

        torch.set_float32_matmul_precision("high")     # TF32 tensor cores for fp32 matmuls
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis.prediction import SEVERITY_GAINS, predict, severity_for
from gpudoctor.checks._profile import gpu_profile, per_window, window_name
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check
from gpudoctor.thresholds import Threshold

if TYPE_CHECKING:
    from gpudoctor.session import Session

SHARE_INFO = Threshold("fp32 GEMM time / kernel time worth saying", 0.10, "share", "gpudoctor")
SPAN_WARNING = Threshold("fp32 GEMM time / GPU span worth doing first", 0.25, "share", "gpudoctor")
TENSOR_CORE_SPEEDUP = Threshold(
    "TF32 over fp32 matmul speed-up", 8.0, "x",
    "TF32 vs fp32 peak on A100/H100; 7.9x measured on an H200 at 4096^3")

REMEDY = Remedy(
    text="Let fp32 matmuls use TF32 tensor cores, or run the forward pass under bf16 autocast (check "
    "accuracy on a validation run). Pre-Ampere GPUs have no TF32: use fp16 autocast with a GradScaler.",
    code="torch.set_float32_matmul_precision(\"high\")        # same as torch.backends.cuda.matmul.allow_tf32 = True\n"
    "torch.backends.cudnn.allow_tf32 = True              # convolutions (the default)\n"
    "# or lower precision where the model allows it:\n"
    "with torch.autocast(\"cuda\", dtype=torch.bfloat16):\n"
    "    loss = criterion(model(x), y)",
)


def _run(session: Session) -> list[Finding]:
    profile = gpu_profile(session)
    if profile.matmul_total_us <= 0:
        raise Skip("no matrix-multiply kernels in the profiled window")
    if profile.kernel_total_us <= 0 or profile.matmul_fp32_us <= 0:
        return []
    share = profile.matmul_fp32_us / profile.kernel_total_us
    if share < SHARE_INFO:
        return []
    span = profile.gpu_busy_us + profile.gpu_idle_us
    span_share = min(1.0, profile.matmul_fp32_us / span) if span > 0 else share
    fp32_of_matmul = profile.matmul_fp32_us / profile.matmul_total_us
    rule = 1.0 / ((1.0 - span_share) + span_share / TENSOR_CORE_SPEEDUP)
    prediction = predict(session, "tf32", host_side=False, rule_gain=rule,
                         rule_detail=f"Amdahl: the fp32 GEMMs ({span_share:.0%} of the GPU span) "
                                     f"{TENSOR_CORE_SPEEDUP:.0f}x faster")
    gain = prediction.gain if prediction is not None else rule
    severity = severity_for(gain)
    if severity != "info" and span_share < SPAN_WARNING:
        severity = "info"  # the matmuls would speed up, the step barely
    window = window_name(profile)
    evidence = {
        "fp32_matmul_share": Evidence(round(share * 100, 1), "%", window, "fp32 GEMM time / kernel time"),
        "fp32_matmul_time": Evidence(round(profile.matmul_fp32_us / 1e3, 3), "ms", window, "fp32 GEMM kernel time"),
        "fp32_matmul_span_share": Evidence(round(span_share * 100, 1), "%", window,
                                           "fp32 GEMM time / GPU span (first to last activity)"),
        "fp32_of_matmul": Evidence(round(fp32_of_matmul * 100, 1), "%", window, "fp32 share of all GEMM time"),
        "tensor_core_matmul_time": Evidence(round(profile.matmul_tensor_core_us / 1e3, 3), "ms", window,
                                            "tensor-core GEMM kernel time"),
        "tf32_enabled": Evidence(profile.tf32_enabled, None, window, "TF32 allowed (allow_tf32)"),
    }
    lead = ("fp32_matmul_share", "fp32_matmul_span_share", "tf32_enabled")  # shown first: the report's key numbers
    evidence = {**{k: evidence[k] for k in lead if k in evidence}, **evidence}
    if profile.tf32_enabled is False:
        why = "TF32 is disabled (torch.backends.cuda.matmul.allow_tf32 is False, PyTorch's default)."
    elif profile.tf32_enabled:
        why = ("TF32 is allowed, yet these matmuls ran in full fp32: the GPU may predate Ampere (no TF32), "
               "or the precision is forced back to \"highest\" somewhere; bf16/fp16 autocast still applies.")
    else:
        why = "Whether TF32 was allowed was not recorded."
    from gpudoctor.collectors.kineto_names import classify_gemm  # the trace's vocabulary: not for `checks`

    top = next((k for k in profile.top_kernels if classify_gemm(k.name) == "fp32"), None)
    message = (
        f"{share:.0%} of the GPU's kernel time in the {window} went to matrix multiplies in full fp32 "
        f"({profile.matmul_fp32_us / 1e3:,.1f} ms; {fp32_of_matmul:.0%} of all matmul time), on CUDA cores "
        f"rather than tensor cores. {why}"
        + (f" Largest: {top.name[:80]} ({top.count}x)." if top is not None else "")
        + f" They fill {span_share:.0%} of the GPU's span."
        + (f" Predicted: {prediction.sentence()}." if prediction is not None else "")
    )
    return [Finding(severity=severity, title="Matmuls run in full fp32, not on tensor cores",
                    message=message, evidence=evidence, remedy=REMEDY, prediction=prediction, estimated_gain=gain)]


run = check("GD304", "fp32-matmul", stage=3, title="Full-fp32 matmuls (no tensor cores)",
            requires=("profile",),
            thresholds=SEVERITY_GAINS,
            fix=Fix("tf32", sizes=True, scenarios=("tf32",)))(per_window(_run))
