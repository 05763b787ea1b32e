"""Samples per second at m times the batch: a model of the step from what the run measured.

A bigger batch multiplies the samples per step by ``m``; the per-sample throughput gain is
``gain(m) = m * T(1) / T(m)``. The step time at ``m`` is the slowest of the paths a step
waits on, each scaled by what grows with the batch:

- **the host**: ``T(1) - W`` (launches, dispatch, the user's Python: the same calls whatever
  the batch), plus the in-process batch production ``W`` (the data wait with
  ``num_workers=0``), plus the share ``s`` of the GPU's extra time the host waits out in
  synchronisations. Of ``W``, only the samples' own work grows with the batch: the fetcher
  (``__getitem__`` of each sample and the collate), its share of the wait measured over the
  run (fetch time over wait time), made ``m`` times over; the rest of the loader's call (the
  iterator's bookkeeping, the sampler's next indices, pinning the collated batch) is one call
  per batch whatever its size, like a launch. Without a measured fetch time all of ``W`` grows;
- **the GPU**: kernels ``K`` grow with the share ``f`` of the SMs they fill: ``K(m) = K * (1 +
  f * (m - 1))``. ``f`` is SM activity over duty cycle (GPM): while a kernel runs, the share of
  the SMs that work. A kernel that fills a tenth of the chip takes about as long with ten times
  the rows; one that fills it takes ten times as long. Without GPM, ``f = 1`` (every kernel
  grows linearly: the cautious side). Copies ``C`` (the batch's bytes) grow as ``m``;
- **the loader**: workers making a batch in ``F`` seconds each, ``n`` of them, deliver one
  every ``F / n``: ``m * F / n``.

``T(m) = max(host(m), gpu(m), loader(m)) + m * U + m * (m - 1) * E``, the three paths built on
the step the profiled window's steps stand for. ``U`` is the steady time per step they do not
(gpudoctor.replay.calibration). Where the loader's epochs turn over within the steady steps (a
dataset of known length, ``P`` steps an epoch, no more than the steady steps) and the long steps
that hold ``U`` come back with them (at least one for each epoch that turned over in the
unprofiled steps), it is the work of each epoch's end and start (checkpoints, images, workers
started again): work per epoch, so per sample, ``m`` times as much per step at ``m`` times the
batch. Fewer long steps than epochs: the epochs turned over within ordinary steps, so the long
ones are not their work; then, as where no epoch turns over, ``U`` is an occasional pause, the
same per step (``m * U`` becomes ``U``). ``E`` is the part of the epochs' work spent
waiting for an epoch's first batch, made from scratch by a worker while the loop waits: ``m``
times bigger, it takes ``m`` times as long. Per step, ``E = F' / P``, ``F'`` the fetch time of one
batch, at most the unrepresented wait per epoch. ``s`` is the share of the GPU's idle time that
began while the host was blocked in a synchronisation (the profiled window): 0 when the host
queues ahead of the GPU (then extra GPU time hides under the host's until the GPU is the
slower), 1 when every idle gap follows a sync (host and GPU take turns: the step is their sum).

An estimate, said so: it assumes the same kernels with more rows (no other algorithm at a new
size), activation memory linear in the batch (the memory bound, GD202) and samples that cost
the same to load. `gpudoctor sweep` measures the real curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.gpu_state import gpu_activity
from gpudoctor.analysis.prediction import MAX_GAIN, replay_of, step_time_now, unrepresented_per_step
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import LoaderInfo, Session

KNEE_GROWTH = Threshold(
    "throughput growth per doubling of the batch below which the curve is at its knee", 1.05, "x",
    "playbook step 4 (SM activity or throughput up by under ~5% per step up: Triton Model Analyzer, "
    "DeepSpeed autotuner)")
MAX_MULTIPLE = CountThreshold(
    "largest batch multiple the curve goes to", 1024, "x",
    "gpudoctor: ten doublings; beyond it the kernels are no longer the ones measured")
PACING_WAIT = Threshold(
    "data wait share above which the workers set the pace (when their fetch time is not measured)", 0.05,
    "share", "TensorBoard profiler plugin: a data wait above 5% of the step is worth a finding")


@dataclass(frozen=True)
class BatchScaling:
    """The step's parts at the measured batch (seconds per step) and how each grows with it."""

    step_s: float  # T(1): the steady step now
    host_s: float  # the host's part that does not grow with the batch
    in_process_data_s: float  # batch production in the training loop itself (num_workers=0)
    kernel_s: float  # GPU kernel time per step
    copy_s: float  # host<->device copy time per step (the batch's bytes)
    fill: float  # share of the SMs the kernels fill while they run (1 when not measured)
    fill_measured: bool
    sync_share: float  # share of the GPU's extra time the host waits out (synchronisations)
    loader_s: float | None  # workers' time to deliver one batch (fetch time / workers), when known
    max_multiple: float | None  # the memory bound, as a multiple of the batch (GD202)
    sources: tuple[str, ...]  # where each number comes from, in words
    apart_s: float = 0.0  # U: per step, the steady time the window's steps do not stand for
    apart_per_epoch: bool = False  # U is the work of the epochs' ends and starts (per sample), not a pause per step
    epoch_first_batch_s: float = 0.0  # E: per step, the wait for each epoch's first batch, made from scratch

    def apart_at(self, m: float) -> float:
        """The time per step at m times the batch that the window's steps do not stand for."""
        if not self.apart_per_epoch:
            return self.apart_s
        return self.apart_s * m + self.epoch_first_batch_s * m * (m - 1.0)

    def step_at(self, m: float) -> float:
        gpu = self.kernel_s * (1.0 + self.fill * (m - 1.0)) + self.copy_s * m
        gpu_now = self.kernel_s + self.copy_s
        host = self.host_s + self.in_process_data_s * m + self.sync_share * max(0.0, gpu - gpu_now)
        loader = self.loader_s * m if self.loader_s is not None else 0.0
        return max(host, gpu, loader, 1e-12) + self.apart_at(m)

    def raw_gain(self, m: float) -> float:
        """Samples per second at m times the batch over now, as the model says it."""
        return max(0.0, m * self.step_s / self.step_at(m))

    def gain(self, m: float) -> float:
        """The same, capped like every prediction (beyond MAX_GAIN it says nothing useful)."""
        return min(MAX_GAIN, self.raw_gain(m))

    def multiples(self) -> list[int]:
        """2, 4, 8 ... up to the memory bound (or MAX_MULTIPLE)."""
        top = min(self.max_multiple or MAX_MULTIPLE, MAX_MULTIPLE)
        out, m = [], 2
        while m <= top:
            out.append(m)
            m *= 2
        return out

    def curve(self) -> tuple[tuple[int, float], ...]:
        return tuple((m, round(self.gain(m), 3)) for m in self.multiples())

    def knee(self) -> int | None:
        """The first multiple whose doubling buys under KNEE_GROWTH, or whose gain reaches the cap
        (or the largest that fits)."""
        multiples = self.multiples()
        for m in multiples:
            gain = self.raw_gain(m)
            if gain >= MAX_GAIN or self.raw_gain(2 * m) < KNEE_GROWTH * gain or 2 * m not in multiples:
                return m
        return None

    def limit(self, m: float) -> str:
        """What bounds the step at m times the batch."""
        gpu = self.kernel_s * (1.0 + self.fill * (m - 1.0)) + self.copy_s * m
        loader = self.loader_s * m if self.loader_s is not None else 0.0
        apart = self.apart_at(m)
        step = self.step_at(m) - apart
        if apart > step:
            return ("the work of each epoch's end and start, which a bigger batch does not shorten per sample"
                    if self.apart_per_epoch else "the steps' occasional pauses")
        if loader >= step:
            return "the DataLoader's workers"
        if gpu >= step:
            return "the GPU's work"
        return "the host (launches, Python" + (", batches made in the loop)" if self.in_process_data_s else ")")


def batch_scaling(session: Session, max_multiple: float | None) -> BatchScaling | None:
    """The model for this run, or None without a steady step time and a GPU time per step."""
    step = step_time_now(session)
    if not step:
        return None
    sources = [f"step {step * 1e3:.3g} ms (steady, unprofiled)"]
    kernel, copy, sync_share = _gpu_parts(session, step, sources)
    if kernel is None:
        return None
    fill, fill_measured = _fill(session, sources)
    apart, apart_wait = unrepresented_per_step(session)
    apart = min(apart, step)
    represented = step - apart  # the step the window's steps stand for, and its data wait
    waited = max(0.0, min(represented, _data_wait(session, step) - apart_wait))
    loader = metrics.main_loader(session)
    in_loop = waited if loader is not None and loader.num_workers == 0 else 0.0
    share = per_sample_share(loader) if loader is not None and in_loop else None
    wait = in_loop * (share if share is not None else 1.0)
    loader_s = _loader_time(session, represented, waited)
    epoch = _steps_per_epoch(session)
    per_epoch = epoch if epoch is not None and _with_the_epochs(session, epoch) else None
    first_batch = _epoch_first_batch(session, apart_wait, per_epoch) if per_epoch else 0.0
    if in_loop and share is not None:
        sources.append(f"{in_loop * 1e3:.3g} ms of batch production in the loop (num_workers=0) per step: its "
                       f"samples' fetch and collate ({share:.0%} of the loader's time, {wait * 1e3:.3g} ms) made m "
                       f"times over, the rest ({(in_loop - wait) * 1e3:.3g} ms: the iterator, the sampler, pinning) "
                       "once per batch")
    elif in_loop:
        sources.append(f"{in_loop * 1e3:.3g} ms of batch production in the loop (num_workers=0) per step, made m "
                       "times over (its fetch time not measured)")
    if loader_s is not None:
        sources.append(f"the workers deliver a batch every {loader_s * 1e3:.3g} ms (fetch time / workers)")
    if apart and per_epoch:
        sources.append(f"{apart * 1e3:.3g} ms per step the profiled window's steps do not stand for: the work of "
                       f"each epoch's end and start (an epoch every {per_epoch:.3g} steps), the same per sample at "
                       "any batch" + (f"; each epoch's first batch made from scratch, {first_batch * 1e3:.3g} ms per "
                                      "step, m times longer" if first_batch else ""))
    elif apart:
        why = ("fewer steps held it than epochs turned over in the steady steps: not the epochs' work"
               if epoch else "no epoch turned over in the steady steps")
        sources.append(f"{apart * 1e3:.3g} ms per step the profiled window's steps do not stand for ({why}: "
                       "occasional pauses), the same per step at any batch")
    return BatchScaling(step_s=step, host_s=max(0.0, represented - waited + in_loop - wait), in_process_data_s=wait,
                        kernel_s=kernel, copy_s=copy, fill=fill, fill_measured=fill_measured, sync_share=sync_share,
                        loader_s=loader_s, max_multiple=max_multiple, sources=tuple(sources), apart_s=apart,
                        apart_per_epoch=per_epoch is not None, epoch_first_batch_s=first_batch)


def _steps_per_epoch(session: Session) -> float | None:
    """The steps of one epoch of the loop's loader (its dataset's length over its batch), where epochs
    turn over within the steady steps; None elsewhere (no loader, an iterable dataset, epochs longer
    than the steady steps)."""
    from gpudoctor.analysis.input_pipeline import batches_per_step

    loader = metrics.main_loader(session)
    if loader is None or loader.iterable or not loader.dataset_len or not loader.batch_size:
        return None
    steps = math.ceil(loader.dataset_len / loader.batch_size) / batches_per_step(session, loader)
    return steps if 0 < steps <= metrics.steady_step_count(session) else None


def per_sample_share(loader: LoaderInfo) -> float | None:
    """The share of the loop's wait for a batch spent making its samples (the fetcher: ``__getitem__``
    of each, then the collate), with ``num_workers=0``: the fetch time over the wait time, both over
    the same batches of the run. The rest of the loader's call does not grow with the batch. None
    without a measured fetch time."""
    if loader.num_workers != 0 or not loader.fetch_batches or loader.fetch_wall_s <= 0 or loader.wait_total_s <= 0:
        return None
    return min(1.0, loader.fetch_wall_s / loader.wait_total_s)


def _with_the_epochs(session: Session, steps_per_epoch: float) -> bool:
    """Whether the steps that hold the time the window's steps do not stand for come back with the
    loader's epochs: at least one for each epoch that turned over in the unprofiled steps. Fewer, and
    most epochs turned over within ordinary steps: the long ones are pauses of something else. True
    where the count was not recorded (the epochs' work, as before it was)."""
    replay = replay_of(session)
    if replay is None or not replay.unrepresented_steps:
        return True
    steps = metrics.unprofiled(session)
    turned = len(steps.durations_us) // steps_per_epoch if steps is not None else 0
    return replay.unrepresented_steps >= turned


def _epoch_first_batch(session: Session, apart_wait: float, steps_per_epoch: float) -> float:
    """E, per step: the wait for each epoch's first batch (one worker makes it from scratch while the
    loop waits), within the unrepresented wait; 0 without workers or a measured fetch time."""
    loader = metrics.main_loader(session)
    fetch = metrics.fetch_time_per_batch(loader) if loader is not None and loader.num_workers > 0 else None
    if apart_wait <= 0 or not fetch:
        return 0.0
    return min(fetch, apart_wait * steps_per_epoch) / steps_per_epoch


def _gpu_parts(session: Session, step: float, sources: list[str]) -> tuple[float | None, float, float]:
    """(kernel time, copy time, sync share) per step: the profiled window's, else the duty cycle's."""
    profile = session.profile
    steps = metrics.window_run_steps(session)  # the window in the run's steps (a GAN's batches)
    if profile is not None and profile.steps >= 3 and profile.kernel_total_us > 0 and steps:
        kernel = profile.kernel_total_us / steps / 1e6
        copy = sum(row.get("us", 0.0) for kind, row in profile.memcpy.items()
                   if kind.startswith(("HtoD", "DtoH"))) / steps / 1e6
        idle = profile.gpu_idle_us
        sync_share = min(1.0, profile.idle_after_sync_us / idle) if idle > 0 else 0.0
        counted = f"{profile.steps} steps" if steps == profile.steps else f"{steps:.3g} of the run's steps"
        sources.append(f"GPU kernels {kernel * 1e3:.3g} ms and host-device copies {copy * 1e3:.3g} ms per step "
                       f"(profiled window, {counted}); {sync_share:.0%} of the GPU's idle time "
                       "followed a synchronisation")
        return kernel, copy, sync_share
    act = gpu_activity(session)
    if act is None or act.duty_cycle is None:
        return None, 0.0, 0.0
    kernel = act.duty_cycle / 100.0 * step
    sources.append(f"GPU busy {kernel * 1e3:.3g} ms per step (duty cycle {act.duty_cycle:.0f}%; no profiled "
                   "window: copies and synchronisations unknown)")
    return kernel, 0.0, 0.0


def _fill(session: Session, sources: list[str]) -> tuple[float, bool]:
    act = gpu_activity(session)
    if act is None or act.sm_activity is None or not act.duty_cycle:
        sources.append("SM activity not measured: every kernel assumed to grow with the batch")
        return 1.0, False
    fill = min(1.0, max(act.sm_activity / act.duty_cycle, 1e-3))
    sources.append(f"kernels fill {fill:.0%} of the SMs while they run (SM activity {act.sm_activity:.2g}% / "
                   f"duty cycle {act.duty_cycle:.2g}%)")
    return fill, True


def _data_wait(session: Session, step: float) -> float:
    """The loop's data wait per step (0 without a DataLoader): not the host's own time."""
    share = metrics.loader_wait_share(session)
    return min(step, share * step) if share else 0.0


def _loader_time(session: Session, step: float, waited: float) -> float | None:
    """How often the workers deliver a batch: fetch time / workers, else, when the loop waited
    for them, the step itself (they set the pace); None without workers."""
    loader = metrics.main_loader(session)
    if loader is None or loader.num_workers <= 0:
        return None
    fetch = metrics.fetch_time_per_batch(loader)
    if fetch:
        return fetch / loader.num_workers
    return step if waited >= PACING_WAIT * step else None
