"""GD305 optimizer-kernels: the optimizer step launches a few kernels per parameter.

What it detects
    ``optimizer.step()`` issues its update one parameter at a time (``foreach=False``,
    or an optimizer without a multi-tensor path): several small kernels per parameter
    tensor, each paid for by the host, while the GPU waits between them. A model of a
    few hundred parameter tensors then spends thousands of launches per step in the
    optimizer alone, which compiling the model does not touch.

Why it matters
    torch.optim's foreach implementation updates all parameters of a group with a few
    multi-tensor kernels, and ``fused=True`` (Adam, AdamW, SGD on CUDA) with one or two;
    both compute the same update. The per-parameter path costs one launch per
    operation per tensor: on a launch-bound step it can be most of the step.

How it is measured
    From the profiled window: torch.optim wraps ``step()`` in a ``record_function``
    range (``Optimizer.step#AdamW.step``). The replay (gpudoctor.replay, scenario
    ``optimizer``) issues the launches inside each step back to back as one chain, at
    the graph rate measured on an H200 (1.13 us per tiny kernel), and re-simulates
    the window; the gain is the step time now over the step time replayed so, never
    more than a host-side fix can buy while the GPU was busy.

Thresholds, and where they come from
    - at least 2 launches per parameter-update chain, and a predicted gain of {{GAIN_WARNING}}
      or more (a 5% step, the same line as every other finding): warning; {{GAIN_CRITICAL}} or
      more: critical.

What to do
    Build the optimizer with ``fused=True`` where it exists (Adam, AdamW, SGD on CUDA)
    or ``foreach=True``; compiling the optimizer step (``torch.compile(opt.step)``) is
    the other route.

Example
    Bad: one kernel per operation per parameter::

        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)

    Good: a few multi-tensor kernels per step::

        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis.prediction import (
    GAIN_WARNING,
    SEVERITY_GAINS,
    predict,
    replay_of,
    severity_for,
)
from gpudoctor.model import Evidence, Finding, Fix, Remedy, Skip, check

if TYPE_CHECKING:
    from gpudoctor.session import Session

REMEDY = Remedy(
    text="Update all parameters with a few multi-tensor kernels: build the optimizer with fused=True where it "
    "exists (Adam, AdamW, SGD on CUDA) or foreach=True; or compile the optimizer step.",
    code="opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)   # or foreach=True\n"
    "# or: opt.step = torch.compile(opt.step)",
)


@check("GD305", "optimizer-kernels", stage=3, title="Per-parameter optimizer kernels",
       requires=("profile",), explains=("GD201",),
       thresholds=SEVERITY_GAINS,
       fix=Fix(scenarios=("optimizer",)))
def run(session: Session) -> list[Finding]:
    replay = replay_of(session)
    if replay is None:
        raise Skip("no replay of a profiled window (the optimizer's launches are read from it)")
    scenario = next((s for s in replay.scenarios if s.name == "optimizer"), None)
    if scenario is None:
        return []  # no optimizer step in the window with more than one launch to chain
    prediction = predict(session, "optimizer", host_side=True)
    if prediction is None or prediction.gain < GAIN_WARNING:
        return []
    window = f"profiled window ({replay.steps} steps)" if replay.steps else "profiled window"
    evidence = {
        "optimizer_launches": Evidence(scenario.changed, "host items", window,
                                       "host work inside optimizer.step() a fused optimizer removes"),
        "predicted_gain": Evidence(round(prediction.gain, 2), "x", window, "step now / step with fused updates"),
    }
    message = (f"optimizer.step() issues its update kernel by kernel: the replay of the {window} with each "
               f"step's launches as one back-to-back chain predicts {prediction.sentence()}. Compiling the model "
               "does not change this; a fused or foreach optimizer does.")
    return [Finding(severity=severity_for(prediction.gain), title="The optimizer updates parameters one at a time",
                    message=message, evidence=evidence, remedy=REMEDY, prediction=prediction)]
