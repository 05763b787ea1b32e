"""What to do with the curve: offline and online batch sizes, with their assumptions.

Offline work (training, batch inference) pays for total hours: the recommendation is
the smallest size within 5% of the best throughput among the sizes that fit with
headroom (the knee, or the memory edge if the curve still climbs there).
Online serving pays for latency: the batch cap of a dynamic batcher is the largest
size meeting the p50 budget (or the knee without one), and the queue delay is what
the budget leaves after running a full batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.sweep.analysis import KNEE_GAIN_PER_DOUBLING, Analysis, ok_points
from gpudoctor.sweep.records import TrialResult

DEFAULT_QUEUE_DELAY_US = 50  # Triton's advice: start near 50 us and raise it


@dataclass(frozen=True)
class Recommendation:
    regime: str  # offline | online
    batch_size: int | None
    text: str
    settings: dict[str, Any] = field(default_factory=dict)
    code: str | None = None
    assumptions: list[str] = field(default_factory=list)


def _candidates(trials: Sequence[TrialResult], analysis: Analysis) -> tuple[list[TrialResult], bool]:
    """Sizes that fit with headroom; (all that fit, False) when none does or it is unknown."""
    fits = [
        t
        for t in ok_points(trials)
        if analysis.memory.smallest_oom is None or t.batch_size < analysis.memory.smallest_oom
    ]
    limit = analysis.memory.largest_fit_with_headroom
    if limit is None:
        return fits, False
    return [t for t in fits if t.batch_size <= limit], True


def offline(trials: Sequence[TrialResult], analysis: Analysis, mode: str) -> Recommendation:
    candidates, headroom_known = _candidates(trials, analysis)
    memory = analysis.memory
    assumptions = [
        (
            "Throughput is the model's own step on one fixed batch, input pipeline excluded "
            "(gpudoctor diagnose measures that)."
        ),
    ]
    if mode == "train":
        assumptions.append(
            "A different batch size changes the optimisation: scale the learning rate (linear scaling "
            "with warm-up) and check accuracy; gradient accumulation reaches a larger effective batch "
            "without the memory."
        )
    if not candidates:
        return Recommendation("offline", None, "No batch size ran: nothing to recommend.", assumptions=assumptions)
    best = max(candidates, key=lambda t: t.timing.samples_per_s)  # type: ignore[union-attr]
    best_rate = best.timing.samples_per_s  # type: ignore[union-attr]
    pick = next(t for t in candidates if t.timing.samples_per_s >= (1 - KNEE_GAIN_PER_DOUBLING) * best_rate)  # type: ignore[union-attr]
    rate = pick.timing.samples_per_s  # type: ignore[union-attr]
    scope = f"within {memory.headroom:.0%} memory headroom" if headroom_known else "among the sizes that fit"
    parts = [
        (
            f"Offline (total hours): use batch {pick.batch_size}: {rate:,.0f} samples/s, "
            f"{rate / best_rate:.0%} of the best {scope} ({best_rate:,.0f} at batch {best.batch_size})."
        )
    ]
    largest = candidates[-1].batch_size
    if pick.batch_size < largest:
        parts.append(
            f"Larger sizes up to {largest} add less than {KNEE_GAIN_PER_DOUBLING:.0%} throughput for more memory."
        )
    elif analysis.knee.batch_size is None:
        parts.append(
            "Throughput was still climbing at the largest size that fits: more memory room (bf16, activation "
            "checkpointing, a smaller optimizer state) would buy more."
        )
    if memory.found:
        parts.append(f"Memory edge: batch {memory.largest_fit} fits, {memory.smallest_oom} runs out of memory.")
    elif memory.estimated_max_batch_with_headroom is not None and memory.largest_fit is not None:
        parts.append(
            f"No out-of-memory up to batch {memory.largest_fit}; a linear fit of peak memory puts the size "
            f"with {memory.headroom:.0%} headroom near {memory.estimated_max_batch_with_headroom} (an estimate)."
        )
    return Recommendation(
        "offline", pick.batch_size, " ".join(parts), settings={"batch_size": pick.batch_size}, assumptions=assumptions
    )


def online(trials: Sequence[TrialResult], analysis: Analysis, mode: str) -> Recommendation:
    if mode != "infer":
        return Recommendation("online", None, "Training has no request latency: only the offline advice applies.")
    candidates, _ = _candidates(trials, analysis)
    if not candidates:
        return Recommendation("online", None, "No batch size ran: nothing to recommend.")
    by_size = {t.batch_size: t for t in candidates}
    latency = analysis.latency
    knee = analysis.knee.batch_size
    knee_cap = max((s for s in by_size if s <= knee), default=None) if knee else None
    if latency is not None:
        budget = f"{latency.budget_s * 1e3:g} ms"
        within = [s for s in by_size if s <= (latency.largest_within or 0)]
        if not within:
            smallest = candidates[0]
            return Recommendation(
                "online",
                None,
                f"No measured size meets the {budget} p50 budget (batch {smallest.batch_size}: "
                f"{smallest.timing.latency_p50_s * 1e3:.3g} ms): the model alone is too slow for it here; "  # type: ignore[union-attr]
                "try lower precision, torch.compile or a faster GPU before batching.",
            )
        budget_cap = max(within)
        if knee_cap is not None and knee_cap < budget_cap:
            # past the knee a bigger batch buys no throughput, only latency
            cap, why = knee_cap, f"the knee; the {budget} budget would allow up to {budget_cap}"
        else:
            cap = budget_cap
            why = f"the largest size whose p50 meets the {budget} budget"
            if budget_cap < (latency.largest_within or 0):
                why += f" within {analysis.memory.headroom:.0%} memory headroom"
    else:
        cap = knee_cap or candidates[-1].batch_size
        why = (
            "the knee: beyond it latency grows with little throughput gain"
            if knee_cap
            else ("the largest size that fits (no knee: throughput still climbs)")
        )
    p50_cap = by_size[cap].timing.latency_p50_s  # type: ignore[union-attr]
    if latency is not None:
        slack = latency.budget_s - p50_cap
        delay_us = max(0, round(min(slack / 2, p50_cap) * 1e6))
        delay_why = (
            f"half of what the budget leaves after a full batch ({slack * 1e3:.3g} ms), at most one full batch's "
            f"run ({p50_cap * 1e3:.3g} ms): waiting longer to fill a batch does not raise throughput"
        )
    else:
        delay_us = DEFAULT_QUEUE_DELAY_US
        single = candidates[0].timing.latency_p50_s * 1e6  # type: ignore[union-attr]
        delay_why = (
            f"the usual starting point; raise it while p50 stays acceptable, rarely beyond one batch-"
            f"{candidates[0].batch_size} run ({single:,.0f} us)"
        )
    code = (
        f"max_batch_size: {cap}\n"
        f"dynamic_batching {{\n  max_queue_delay_microseconds: {delay_us}\n}}\n"
        f"# LLM server (vLLM): --max-num-seqs {cap}"
    )
    text = (
        f"Online (latency): start a dynamic batcher with a batch cap of {cap} ({why}; p50 {p50_cap * 1e3:.3g} ms) "
        f"and a queue delay of {delay_us} us ({delay_why}). In Triton: max_batch_size {cap}, "
        f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}. For an LLM server the same cap "
        f"is vLLM's --max-num-seqs {cap}: the most sequences batched per scheduler step."
    )
    assumptions = [
        (
            "Latency is the model's compute for one batch on an otherwise idle GPU; a server adds queueing, "
            "pre/post-processing and network time."
        ),
        (
            f"One model instance; under sustained load a request can also wait for the batch in flight (up to "
            f"{p50_cap * 1e3:.3g} ms): watch the served p50 and lower the cap one step if it exceeds the target."
        ),
        (
            "vLLM's --max-num-seqs maps to this cap only when one sample here is one sequence at the serving "
            "length; for LLM decoding the KV cache (sized by --gpu-memory-utilization), not activations, is "
            "usually the memory limit."
        ),
    ]
    settings = {
        "triton": {"max_batch_size": cap, "max_queue_delay_microseconds": delay_us},
        "vllm": {"max_num_seqs": cap},
    }
    return Recommendation("online", cap, text, settings=settings, code=code, assumptions=assumptions)


def observations(analysis: Analysis) -> list[str]:
    """Short statements about power and SM activity, in the playbook's terms."""
    notes = []
    measured = [p for p in analysis.power if p.fraction is not None]
    if measured:
        top = max(measured, key=lambda p: p.fraction)  # type: ignore[arg-type, return-value]
        limit = f"{top.power_limit_w:.0f} W" if top.power_limit_w else "the limit"
        if top.verdict == "at_limit":
            notes.append(
                f"Power reached {top.fraction:.0%} of {limit} at batch {top.batch_size}: "
                "at the cap, clocks may be held down."
            )
        elif top.verdict == "near_full":
            notes.append(
                f"Power reached {top.fraction:.0%} of {limit} at batch {top.batch_size}: the chip is near fully used."
            )
        else:
            notes.append(
                f"Power stayed below 80% of {limit} at every size (at most {top.fraction:.0%}, batch "
                f"{top.batch_size}): the chip is not saturated; look at kernel efficiency next (playbook step 3)."
            )
    sm = analysis.knee_sm_activity
    if sm is not None and sm.peak_value is not None:
        where = f"levels off at batch {sm.batch_size}" if sm.batch_size else "still climbs at the largest size"
        notes.append(f"SM activity peaks at {sm.peak_value:.0f}% (batch {sm.peak_batch_size}) and {where}.")
    return notes
