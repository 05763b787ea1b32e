"""When a batch size may run in the process that ran the previous one (the parent's policy).

A fresh process per size protects three things: a sticky CUDA error or a crash ends
only its own process; an out-of-memory is judged on a clean allocator; the peak memory
of a size is that size's. The first two only matter near the memory edge or after
something went wrong; the third is kept in a reused process by resetting the peak
statistics and emptying the cache between sizes (gpudoctor.sweep.worker). Far from
the edge a reused process therefore measures the same thing, without paying again for
Python, torch, the CUDA context and the target's imports (8-9 s a size on an H200).

The rule, for the next size `b`:
- the first size runs in a fresh process, and so does every size once one ran out of
  memory, crashed, hit a CUDA error or timed out: reuse ends for the sweep. A size that
  failed in a reused process ends it too (the runner runs that size again, fresh). A
  plain error of the target in a fresh process (BatchNorm refuses batch 1 in training)
  is the target's at that size: its process is ended, and later sizes may share a new one;
- otherwise `b` reuses the process when its predicted peak stays under
  `safe_share(headroom)` of the free memory: predicted = the last measured peak plus the
  per-sample slope times the added samples. The slope comes from the two largest
  measured sizes (the larger of the last two such slopes), or, with one size measured,
  from everything but the model's bytes divided by its samples (an upper bound).

The share: a size must still fit with the sweep's `--headroom` kept free even if the
prediction is off by PREDICTION_ERROR (allocator rounding and cuDNN/cuBLAS workspaces,
which do not grow linearly with the batch), so share = (1 - headroom) / PREDICTION_ERROR:
0.6 of free memory at the default headroom of 0.1.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.metrics import format_bytes
from gpudoctor.sweep import records
from gpudoctor.sweep.records import TrialResult

PREDICTION_ERROR = 1.5  # how far a linear prediction of the peak may fall short
DEFAULT_HEADROOM = 0.1


def safe_share(headroom: float = DEFAULT_HEADROOM) -> float:
    """The share of free memory a size's predicted peak may reach in a reused process."""
    return max(0.0, 1.0 - headroom) / PREDICTION_ERROR


@dataclass(frozen=True)
class Decision:
    reuse: bool
    reason: str  # in words, for the log and the benchmark


def _measured(history: Sequence[TrialResult]) -> list[tuple[int, int]]:
    """(batch size, peak bytes) of the sizes that ran, ascending; the latest run of a size wins."""
    peaks: dict[int, int] = {}
    for trial in history:
        if trial.status == records.OK and trial.memory.peak_bytes is not None:
            peaks[trial.batch_size] = trial.memory.peak_bytes
    return sorted(peaks.items())


def predict_peak(history: Sequence[TrialResult], size: int) -> int | None:
    """The peak memory `size` should need, from the sizes measured so far; None: no basis."""
    points = _measured(history)
    if not points:
        return None
    last_size, last_peak = points[-1]
    if len(points) >= 2:
        pairs = itertools.pairwise(points[-3:])
        slopes = [(peak_b - peak_a) / (size_b - size_a) for (size_a, peak_a), (size_b, peak_b) in pairs]
        slope = max(0.0, *slopes)
    else:
        model = next((t.memory.model_bytes for t in history if t.memory.model_bytes is not None), 0) or 0
        slope = max(0, last_peak - model) / last_size
    return int(last_peak + slope * max(0, size - last_size))


def _free_bytes(history: Sequence[TrialResult]) -> int | None:
    """The least free memory any trial started with (others may share the device)."""
    values = [t.memory.free_at_start_bytes for t in history if t.memory.free_at_start_bytes]
    return min(values) if values else None


@dataclass(frozen=True)
class ReusePolicy:
    share: float = safe_share()

    @classmethod
    def for_headroom(cls, headroom: float) -> ReusePolicy:
        return cls(share=safe_share(headroom))

    def decide(self, history: Sequence[TrialResult], size: int) -> Decision:
        """May `size` run in the process that ran `history[-1]`? `history`: every trial so far."""
        if not history:
            return Decision(False, "the first size")
        failed = next((t for t in history if t.status not in (records.OK, records.ERROR)), None)
        if failed is not None:
            return Decision(False, f"reuse ended at batch {failed.batch_size} ({failed.status})")
        if history[-1].status != records.OK:
            return Decision(False, f"batch {history[-1].batch_size} failed ({history[-1].status})")
        predicted, free = predict_peak(history, size), _free_bytes(history)
        if predicted is None or free is None:
            return Decision(False, "no memory measured to predict from")
        budget = self.share * free
        words = f"predicted peak {format_bytes(predicted)} of {format_bytes(free)} free"
        if predicted > budget:
            return Decision(False, f"{words}: near the memory edge (over {self.share:.0%})")
        return Decision(True, f"{words} (under {self.share:.0%})")
