"""When a trial's steps/s can be compared with the baseline's, and over which steps.

A trial is compared with the run without the remedy only when both measured the same
phase (their steps come from the same source: optimizer steps against optimizer steps,
never a validation loop's batches) and each has enough steady steps to drain its
DataLoader's prefetch queue several times. A loader with ``w`` workers holds up to
``w x prefetch_factor`` batches ready; a long warm-up (cuDNN autotuning, compilation)
lets the workers fill that queue, and the first steady steps are then fed from it
without waiting, whatever the loader's real pace. So those first ``queue`` steady steps
are left out of the rate, and the steady steps must come to at least ``DRAIN_TIMES``
queues (the first one drained, two more at the loader's own pace).
Otherwise the trial is "inconclusive", with the reason, instead of a gain.
"""

from __future__ import annotations

import dataclasses

from gpudoctor import metrics
from gpudoctor.session import Session

DRAIN_TIMES = 3  # steady steps after the prefilled queue, in queues: "drained several times"
DEFAULT_PREFETCH = 2  # torch.utils.data.DataLoader's prefetch_factor when it has workers


def prefetch_queue(session: Session) -> int:
    """Batches the main DataLoader's workers can hold ready (0 without workers)."""
    loader = metrics.main_loader(session)
    if loader is None or loader.num_workers <= 0:
        return 0
    return loader.num_workers * (loader.prefetch_factor or DEFAULT_PREFETCH)


def after_queue(session: Session, queue: int) -> Session:
    """The session with its first `queue` steady steps counted as warm-up (fed from the queue)."""
    if queue <= 0:
        return session
    steps = dataclasses.replace(session.steps, warmup_steps=session.steps.warmup_steps + queue)
    return dataclasses.replace(session, steps=steps)


def inconclusive(baseline: Session, trial: Session) -> str | None:
    """Why the two runs' steps/s cannot be compared, or None when they can."""
    if baseline.steps.source != trial.steps.source:
        return (f"not the same phase: the trial's steps were {trial.steps.source or 'not marked'}, the run "
                f"without the remedy's {baseline.steps.source or 'not marked'}")
    for name, run in (("the run without the remedy", baseline), ("the trial", trial)):
        queue = prefetch_queue(run)
        steady = len(run.steady_steps())
        if queue and steady < DRAIN_TIMES * queue:
            loader = metrics.main_loader(run)
            assert loader is not None
            return (f"{name} had {steady} steady steps: its first {queue} may come from the prefetch queue "
                    f"its {loader.num_workers} workers filled during the warm-up ({loader.num_workers} x "
                    f"prefetch_factor {loader.prefetch_factor or DEFAULT_PREFETCH}), and {DRAIN_TIMES * queue} "
                    f"are needed to drain it {DRAIN_TIMES} times: run longer (--steps, --duration)")
    return None
