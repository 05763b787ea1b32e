"""Derived numbers several checks and the summary share, computed from a Session.

Every function returns None when the inputs were not measured: "not measured"
is never zero.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

# the formatting lives in gpudoctor.base.text (the renderers use it too); named here for the checks
from gpudoctor.base.text import format_bytes as format_bytes
from gpudoctor.base.text import format_duration as format_duration
from gpudoctor.base.text import format_run_seconds as format_run_seconds

if TYPE_CHECKING:
    from gpudoctor.session import CpuSample, GpuSample, LoaderInfo, ProfileSummary, Session, StepRecord

Sample = TypeVar("Sample", "CpuSample", "GpuSample")  # a CPU or a GPU sample, taken at .t


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not values:
        return None
    data = sorted(values)
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


@dataclass(frozen=True)
class StepSummary:
    count: int  # steady steps the numbers cover
    first_index: int  # 1-based index of the first steady step
    last_index: int
    step_time_median_s: float
    step_time_p90_s: float
    data_wait_share: float  # total wait / total step time over steady steps
    data_wait_median_s: float
    steps_per_s: float

    @property
    def window(self) -> str:
        return f"steady steps {self.first_index}-{self.last_index}"


def step_summary(session: Session) -> StepSummary | None:
    records = session.steady_steps()
    if len(records) < 3:
        return None
    durations = [r.duration_s for r in records]
    waits = [min(r.data_wait_s, r.duration_s) for r in records]
    total = sum(durations)
    if total <= 0:
        return None
    first = session.steps.warmup_steps + 1
    rate = len(records) / total
    median, p90 = statistics.median(durations), percentile(durations, 90) or 0.0
    # CUDA is asynchronous: a host that queued its steps long before the GPU ran them (a short
    # run of long GPU steps) measured its own speed, not the steps'. No step is shorter than
    # its GPU work: where the profiled window says what that is, the steps took that long.
    gpu_step = gpu_step_s(session)
    window = steady_window(session)
    # (beyond a few sampling intervals: the samples after the last step cover their whole interval)
    margin = max(HOST_AHEAD_SHARE * total, HOST_AHEAD_SAMPLES * (session.gpu_sample_interval_s or 0.5))
    if gpu_step is not None and _ran_ahead(median, gpu_step):
        rate, median, p90 = 1.0 / gpu_step[1], gpu_step[1], max(p90, gpu_step[1])
    elif window is not None and window[1] - records[-1].t > margin:
        # else, when the GPU kept working well past the last step, the steps took until it was done
        rate = len(records) / max(total, window[1] - window[0])
    return StepSummary(
        count=len(records),
        first_index=first,
        last_index=first + len(records) - 1,
        step_time_median_s=median,
        step_time_p90_s=p90,
        data_wait_share=sum(waits) / total,
        data_wait_median_s=statistics.median(waits),
        steps_per_s=rate,
    )


# The host's steady steps shorter than half the GPU work per step (profiled window): clearly
# the host ran ahead, queueing work the GPU did later.
HOST_AHEAD_GPU_SHARE = 0.5
HOST_AHEAD_SHARE = 0.1  # the GPU busy past the last step by more than this share of the steps' time
HOST_AHEAD_SAMPLES = 5  # ... and by more than this many GPU sampling intervals


def _ran_ahead(host_median_s: float, gpu_step: tuple[float, float]) -> bool:
    return host_median_s < HOST_AHEAD_GPU_SHARE * gpu_step[0]


def host_ran_ahead(session: Session) -> bool:
    """Whether the host queued its steady steps far faster than the GPU ran them (the steps
    then took as long as their GPU work: step_summary)."""
    records = session.steady_steps()
    gpu_step = gpu_step_s(session)
    if len(records) < 3 or gpu_step is None:
        return False
    return _ran_ahead(statistics.median(r.duration_s for r in records), gpu_step)


def gpu_step_s(session: Session) -> tuple[float, float] | None:
    """(GPU busy, GPU span) per step of the profiled window, in seconds: kernel, copy and memset
    time, and that plus the short gaps between back-to-back kernels (launch latency the GPU
    waits out even with work queued). None without a window of at least 3 steps (of the run's)."""
    profile = session.profile
    steps = window_run_steps(session)
    if profile is None or profile.steps < 3 or profile.gpu_busy_us <= 0 or not steps:
        return None
    busy = profile.gpu_busy_us / steps / 1e6
    return busy, busy + profile.idle_gap_kernel_to_kernel_us / steps / 1e6


def window_run_steps(session: Session, profile: ProfileSummary | None = None) -> float | None:
    """The profiled window's length in the run's steps (Session.steps.source), what its per-step
    totals are divided by to compare with the steady steps: its own steps where they are the run's,
    else as its replay counted them in the trace (a GAN's window of optimizer steps holds half as
    many DataLoader batches); None when not known. `profile`: the primary window by default."""
    profile = profile if profile is not None else session.profile
    if profile is None or not profile.steps:
        return None
    replay = profile.replay
    if replay is not None and replay.error is None and replay.run_steps and replay.steps:
        return profile.steps * replay.run_steps / replay.steps
    if session.steps.source is None or profile.step_source in (None, session.steps.source):
        return float(profile.steps)
    return None


def loader_wait_share(session: Session) -> float | None:
    """Data-wait share of the steady steps (loader totals without step records); None
    without a DataLoader: a loop that reads no loader did not wait 0%, it was not measured."""
    if not any(lo.batches > 0 for lo in session.loaders):
        return None
    summary = step_summary(session)
    if summary is not None:
        return summary.data_wait_share
    if not session.loaders or session.duration_s <= 0:
        return None
    return min(1.0, sum(lo.wait_total_s for lo in session.loaders) / session.duration_s)


def main_loader(session: Session) -> LoaderInfo | None:
    """The loader the training loop spent most time on (most batches, then most wait)."""
    loaders = [lo for lo in session.loaders if lo.batches > 0]
    if not loaders:
        return None
    return max(loaders, key=lambda lo: (lo.wait_total_s, lo.batches))


def fetch_cpu_ratio(loader: LoaderInfo) -> float | None:
    """Share of batch-production wall time spent computing or wanting a CPU.

    ~1 = CPU-bound (including time queued for a core on an oversubscribed machine),
    far below = waiting on storage, network, sleeps or locks.
    """
    if loader.fetch_batches == 0 or loader.fetch_wall_s <= 0:
        return None
    busy = loader.fetch_cpu_s + (loader.fetch_runqueue_s or 0.0)
    return min(1.0, busy / loader.fetch_wall_s)


def fetch_time_per_batch(loader: LoaderInfo) -> float | None:
    if loader.fetch_batches == 0:
        return None
    return loader.fetch_wall_s / loader.fetch_batches


MIN_STEADY_STEPS = 10  # below this a mean step time is known to +-6% at best (CV 10%): caveat it


@dataclass(frozen=True)
class UnprofiledSteps:
    """The steady steps measured outside a profiler window: what its replay is calibrated to
    (gpudoctor.replay.calibration), and which of them the window's own steps stand for."""

    step_us: float  # mean step (step_summary's rate: a host that ran ahead of its GPU counts the GPU's time)
    wait_us: float | None  # mean data wait per step; None without a DataLoader
    source: str | None = None  # what marked them (Session.steps.source); None: the window's own steps
    durations_us: tuple[float, ...] = ()  # each step, in order: the replay tells which ones the window holds
    waits_us: tuple[float, ...] = ()


def unprofiled(session: Session) -> UnprofiledSteps | None:
    """The run's steady steps outside the profiler windows, as the replay of its primary window
    is calibrated to them; None without a steady step time."""
    steady = step_summary(session)
    if steady is None or steady.steps_per_s <= 0:
        return None
    step_us = 1e6 / steady.steps_per_s
    return _unprofiled(session, session.steady_steps(), step_us,
                       step_us * steady.data_wait_share if session.loaders else None)


NEAR_WINDOW_S = 30.0  # steps this close to a later window stand for its phase


def unprofiled_near(session: Session, start_s: float, end_s: float) -> UnprofiledSteps | None:
    """unprofiled() from the steps just before and after a window (its phase), outside it."""
    records = [r for r in session.steady_steps()
               if (start_s - NEAR_WINDOW_S <= r.t - r.duration_s and r.t <= start_s)
               or (end_s + 0.5 <= r.t - r.duration_s and r.t <= end_s + NEAR_WINDOW_S)]
    if len(records) < 3:
        return None
    step_us = 1e6 * sum(r.duration_s for r in records) / len(records)
    wait_us = 1e6 * sum(min(r.data_wait_s, r.duration_s) for r in records) / len(records)
    return _unprofiled(session, records, step_us, wait_us if session.loaders else None)


def _unprofiled(session: Session, records: list[StepRecord], step_us: float,
                wait_us: float | None) -> UnprofiledSteps:
    return UnprofiledSteps(step_us=step_us, wait_us=wait_us, source=session.steps.source,
                           durations_us=tuple(r.duration_s * 1e6 for r in records),
                           waits_us=tuple(min(r.data_wait_s, r.duration_s) * 1e6 for r in records))


def steady_step_count(session: Session) -> int:
    summary = step_summary(session)
    return summary.count if summary is not None else 0


def steady_window(session: Session) -> tuple[float, float] | None:
    """Session-time interval of steady state, for CPU and GPU samples.

    It starts with the first steady step. It ends with the last step, extended while
    the GPU keeps working right after it: CUDA is asynchronous, so the CPU can
    record its last step long before the GPU finishes the work it queued (an H200
    ran fp32 matmuls for 4 s after the loop's last optimizer.step() returned).
    """
    records = session.steady_steps()
    if not records:
        return None
    start, end = records[0].t - records[0].duration_s, records[-1].t
    for sample in sorted((g for g in session.gpu_samples if g.t > end), key=lambda g: g.t):
        busy = sample.util_percent if sample.util_percent is not None else sample.sm_activity
        if not busy:
            break
        end = sample.t
    return start, end


def previous_step_end(records: list[StepRecord], before_s: float) -> float | None:
    """When the last step that ended at or before BEFORE_S (session time) ended; None without one."""
    return max((r.t for r in records if r.t <= before_s), default=None)


def next_step_start(records: list[StepRecord], after_s: float) -> float | None:
    """When the first step that ended after AFTER_S (session time) began; None without one."""
    following = next((r for r in records if r.t > after_s), None)
    return following.t - following.duration_s if following is not None else None


def _outside_profile(session: Session, samples: list[Sample]) -> list[Sample]:
    """Drop samples taken while the profiler window ran: tracing slows the workload.

    The window lasts until the loop's next step begins: the profiler's stop (collecting and
    exporting the trace) holds the loop, and no step runs meanwhile. It took half a second on
    a small trace and 26 s on a 3.9M-event one (ResNet-50, H200), with the GPU idle and one
    core busy: counted as steady state, it diluted the GPU's busy share and the main
    process's CPU use by how long it lasted against the steps around it.
    """
    profile = session.profile
    if profile is None or profile.window_start_s is None or profile.window_end_s is None:
        return samples
    lo, hi = profile.window_start_s, profile.window_end_s + 0.5  # + the trace export
    resumed = next_step_start(session.steps.records, profile.window_end_s)
    if resumed is not None:
        hi = max(hi, resumed)  # the stop's tail: no step ran until then
    kept = [s for s in samples if not lo <= s.t <= hi]
    return kept if len(kept) >= 3 else samples


def samples_in(samples: list[Sample], window: tuple[float, float] | None,
               interval_s: float | None = None) -> list[Sample]:
    """The samples that measured some of `window` (all of them when there is no window).

    A sample taken at t reports the interval (t - interval_s, t]: utilization and CPU
    percentages are averages since the previous sample. A window shorter than the
    interval may hold no sample at all; then only the one sample that straddles it
    counts, never the whole run (start-up and teardown are idle, and would pass for
    a measurement of the steady state).
    """
    if window is None:
        return list(samples)
    lo, hi = window
    reach = interval_s or 0.0
    return [s for s in samples if s.t >= lo and (s.t <= hi or s.t - reach < hi)]


def _steady(session: Session, samples: list[Sample], interval_s: float | None) -> list[Sample]:
    return _outside_profile(session, samples_in(samples, steady_window(session), interval_s))


def cpu_samples_steady(session: Session) -> list[CpuSample]:
    return _steady(session, session.cpu_samples, session.cpu_sample_interval_s)


def gpu_samples_steady(session: Session) -> list[GpuSample]:
    return _steady(session, session.gpu_samples, session.gpu_sample_interval_s)


def gpu_metric_mean(samples: list[GpuSample], attr: str) -> float | None:
    values = [getattr(s, attr) for s in samples if getattr(s, attr) is not None]
    return mean(values)


def usable_cores(session: Session) -> float | None:
    cpu = session.environment.cpu
    return cpu.usable_cores or cpu.affinity_cores or cpu.logical_cores
