"""What producing batches elsewhere buys: the step with batches made in the loop moved out, or
with `w` workers, built on the step without any data wait (the replay where there is one).

- **In-process production is host work in series with the step.** With ``num_workers=0``
  the loop itself makes every batch (``F``, measured where it happens): while it does,
  nothing new is queued, and the GPU can only finish work queued before. Without it the
  step takes the loop's other host time, ``step - F``, or the GPU's busy time per step
  (the GPU samples, else the replayed window), whichever is longer. A replay that finds
  such a wait hidden while the GPU was idle contradicts the GPU's own samples: the
  series model decides then.
- **Workers pay a hand-off and share the cores.** With ``w`` workers, per batch the loop
  takes its time without any wait (``I``: the replayed step without data waits, per
  batch), receives the batch (``H``, the hand-off) and waits for what the workers could
  not produce meanwhile: ``I + H + max(0, F / w' - (I + H)) + U``. ``U`` is the time per
  batch the profiled window's steps do not stand for (an epoch's end and start:
  gpudoctor.replay.calibration), left out of ``I`` and unchanged by the workers. ``w'`` is the workers the
  cores carry: the usable cores per rank less what the loop itself uses (its measured CPU
  per batch, at the predicted step rate; at least one core), over each worker's CPU share
  of a batch. A faster loop needs more of a core, which leaves fewer to the workers: the
  predicted batch time is the one at which the two agree.
- **Workers that are not persistent start again each epoch.** Every iterator after the first
  (an epoch) forks or spawns its workers between steps, one after another (``S`` each, the
  run's own iterator timing where it had workers, else WORKER_START_S), and its first batch
  comes only after a worker started and made it. ``w`` workers instead of ``n`` add
  ``(w - n) S`` per epoch, and with ``n = 0`` the first batch's ``F`` becomes a wait; spread over
  the epoch's batches, this is time apart from the loop's rhythm, like ``U``. With
  ``persistent_workers=True`` only the first iterator starts them, before the steady steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor import metrics
from gpudoctor.analysis.prediction import MAX_GAIN, unrepresented_per_step
from gpudoctor.model import Prediction

if TYPE_CHECKING:
    from gpudoctor.analysis.input_pipeline import InputStall
    from gpudoctor.session import LoaderInfo, Session

MIN_CPU_SHARE = 0.1  # a worker is never counted as using less than a tenth of a core per batch made


def gpu_busy_share(session: Session) -> tuple[float, str] | None:
    """(share of the step the GPU was busy, where that comes from): the steady GPU samples,
    else the replayed window."""
    from gpudoctor.analysis.gpu_state import gpu_load
    from gpudoctor.analysis.prediction import replay_of

    load = gpu_load(session)
    if load is not None and load.samples >= 3 and load.busy_share is not None:
        return load.busy_share, "the steady GPU samples"
    replay = replay_of(session)
    if replay is not None and replay.baseline_gpu_busy_us is not None and replay.baseline_span_us:
        # over the loop's time: the steady time the window's steps do not stand for included
        return (min(1.0, replay.baseline_gpu_busy_us / replay.loop_us(replay.baseline_span_us)),
                "the replayed window")
    return None


def in_process_prediction(session: Session, found: InputStall, loader: LoaderInfo,
                          per_step: int) -> Prediction | None:
    """The step with the batches the loop makes itself (num_workers=0) made elsewhere, instantly."""
    fetch = metrics.fetch_time_per_batch(loader)
    busy = gpu_busy_share(session)
    if loader.num_workers != 0 or fetch is None or found.steps is None or busy is None:
        return None
    now = 1.0 / found.steps.steps_per_s
    # what the loop makes per step is at most what it waited: the rest of its wait was not production
    production = min(fetch * per_step, found.share * now)
    host = now - production
    gpu = busy[0] * now
    after = max(host, gpu, now / MAX_GAIN)
    gain = max(1.0, now / after)
    detail = (f"the loop makes its batches itself (num_workers=0), in series with the step: "
              f"{metrics.format_duration(production)} of each {metrics.format_duration(now)} step; without it the "
              f"step takes its other host time, {metrics.format_duration(host)}, or the GPU's busy time, "
              f"{metrics.format_duration(gpu)} ({busy[0]:.0%} busy, from {busy[1]}), whichever is longer")
    return Prediction(gain=gain, method="rule", label="if batches arrived instantly", detail=detail,
                      step_time_s=now, predicted_step_time_s=now / gain)


def loop_cpu_per_batch(session: Session, loader: LoaderInfo, per_step: int) -> float | None:
    """CPU seconds the main process spends per batch besides making it (launching, the hand-off,
    the pin-memory thread), from its measured CPU use over the steady steps.

    With num_workers=0 in a run whose model computes on the GPU, the batch is made on the main
    thread and torch's intra-op threads help it (a FakeData/ToTensor batch kept 14 cores of the
    main process busy while its fetching thread used one): their CPU leaves the loop with the
    batch. The loop's own CPU is then its main thread's, less the fetch's, when the main thread
    was sampled. In a CPU run those threads do the model's arithmetic, the loop's own work: the
    whole process counts."""
    summary = metrics.step_summary(session)
    steady = metrics.cpu_samples_steady(session)
    samples = [s.main_percent for s in steady if s.main_percent is not None]
    if loader.num_workers == 0 and session.torch_cuda_used:
        thread = [s.main_thread_percent for s in steady if s.main_thread_percent is not None]
        samples = thread or samples
    if summary is None or not samples or summary.steps_per_s <= 0:
        return None
    batches_per_s = summary.steps_per_s * per_step
    main_cores = sum(samples) / len(samples) / 100.0
    cpu = main_cores / batches_per_s
    if loader.num_workers == 0 and loader.fetch_batches:
        cpu -= loader.fetch_cpu_s / loader.fetch_batches  # making the batch leaves the loop
    return max(0.0, cpu)


def iterators_created(loader: LoaderInfo) -> int:
    """Iterators the loader created over the run (its epochs): the agent's count, else the epochs its
    batches fill at no more than ceil(len / batch) batches each (a DistributedSampler gives a rank
    fewer, so this never counts more epochs than there were); 1 when neither is known."""
    if loader.iterators > 0:
        return loader.iterators
    if loader.iterable or not loader.dataset_len or not loader.batch_size or loader.batches <= 0:
        return 1
    per_epoch = -(-loader.dataset_len // loader.batch_size)
    return max(1, -(-loader.batches // per_epoch))


def worker_start_s(loader: LoaderInfo) -> tuple[float, bool]:
    """(seconds the loop spends starting one worker when it creates an iterator, measured?): the run's
    iterator creation time per worker where it had workers, else the host default."""
    from gpudoctor.analysis.input_pipeline import WORKER_START_S

    if loader.num_workers > 0 and loader.iterators > 0 and loader.iterators_s > 0:
        return loader.iterators_s / loader.iterators / loader.num_workers, True
    return float(WORKER_START_S), False


def restart_per_batch(loader: LoaderInfo, workers: int, fetch: float) -> float:
    """Seconds per batch that starting `workers` workers at every epoch after the first adds over
    the run's `num_workers`: their start-up, and with none now the first batch that becomes a wait
    (a worker makes it only once started). Nothing with persistent_workers: they start once, before
    the steady steps."""
    restarts = iterators_created(loader) - 1
    if loader.persistent_workers or restarts <= 0 or loader.batches <= 0 or workers <= loader.num_workers:
        return 0.0
    per_worker = worker_start_s(loader)[0]
    first_batch = fetch if loader.num_workers == 0 else 0.0  # with workers now, the run's waits hold it
    return restarts * ((workers - loader.num_workers) * per_worker + first_batch) / loader.batches


def workers_prediction(session: Session, found: InputStall, loader: LoaderInfo, instant: Prediction,
                       fetch: float, compute: float, workers: int, handoff: float,
                       per_step: int, cores_per_rank: float | None) -> Prediction:
    """The step with `workers` workers, on the step without any wait (`instant`)."""
    now = instant.step_time_s
    if now is None:
        now = (compute + fetch if loader.num_workers == 0 else compute) * per_step
    # the time per batch the window's steps do not stand for (an epoch's end and start) is spent
    # apart from the loop's rhythm: the workers' pace is set against the rest of the batch
    apart = min(unrepresented_per_step(session)[0], now / instant.gain) / per_step
    instant_batch = now / instant.gain / per_step - apart
    restart = restart_per_batch(loader, workers, fetch)
    ratio = max(MIN_CPU_SHARE, metrics.fetch_cpu_ratio(loader) or 1.0)
    loop_cpu = loop_cpu_per_batch(session, loader, per_step)
    floor = instant_batch + handoff

    def carried_at(batch_s: float) -> float:
        """The workers the cores carry while the loop takes `batch_s` a batch."""
        if cores_per_rank is None:
            return float(workers)
        loop_cores = max(1.0, loop_cpu / batch_s) if loop_cpu is not None else 1.0
        return max(1.0, min(float(workers), (cores_per_rank - loop_cores) / ratio))

    def step_at(batch_s: float) -> float:
        return floor + max(0.0, fetch / carried_at(batch_s) - floor) + apart + restart

    # a faster loop uses more of a core, which leaves fewer to the workers: the batch time is where
    # the two agree (step_at falls as the batch time grows, so the crossing is one, found by halving)
    low, high = floor + apart + restart, floor + apart + restart + fetch
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if step_at(middle) > middle else (low, middle)
    after_batch = high
    carried = carried_at(after_batch)
    after = after_batch * per_step
    # no floor at 1x: workers whose hand-off (and start-up each epoch) costs the loop more than making the
    # batch itself make the step slower, and the prediction says so
    gain = min(instant.gain, now / after)
    wait = max(0.0, after_batch - apart - restart - instant_batch - handoff)
    detail = (f"{instant.detail}; per batch: the loop without waits {metrics.format_duration(instant_batch)} "
              f"(that {instant.method}) + hand-off {metrics.format_duration(handoff)} + wait "
              f"{metrics.format_duration(wait)} (F = {metrics.format_duration(fetch)} over "
              + (f"{carried:.3g} of {workers} workers the cores carry" if carried < workers else f"{workers} workers")
              + ")"
              + (f" + {metrics.format_duration(apart)} the window's steps do not hold (unchanged)" if apart else "")
              + (f" + {metrics.format_duration(restart)} starting the workers again each epoch "
                 f"({_restart_text(loader)}; persistent_workers=True starts them once)" if restart else "")
              + f", against {metrics.format_duration(now / per_step)} now with {loader.num_workers}")
    return Prediction(gain=gain, method=instant.method, label=f"with num_workers={workers}", detail=detail,
                      scenario=instant.scenario, step_time_s=instant.step_time_s,
                      predicted_step_time_s=instant.step_time_s / gain if instant.step_time_s else None)


def _restart_text(loader: LoaderInfo) -> str:
    """Where the restart cost comes from, in words."""
    per_worker, measured = worker_start_s(loader)
    epochs = iterators_created(loader)
    counted = "iterators created" if loader.iterators > 0 else "epochs from the dataset's length"
    how = "this run's iterators" if measured else "measured on an H200 host"
    return (f"{epochs} {counted} over {loader.batches} batches, {metrics.format_duration(per_worker)} per worker "
            f"started ({how})")
