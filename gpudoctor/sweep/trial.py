"""One batch size in a trial process: `python -m gpudoctor.sweep.trial --spec S --result R`
(one size), or many sizes one after another in gpudoctor.sweep.worker.

Why a process of its own: an out-of-memory at one size leaves the caching allocator
fragmented and cuDNN/cuBLAS workspaces shrunk, and a sticky CUDA error (illegal
memory access, device-side assert) makes the whole CUDA context unusable. Near the
memory edge and after any failure every size starts in a fresh process; far from the
edge a process is reused (gpudoctor.sweep.reuse says when), with its peak statistics
reset between sizes. What does not depend on the size (the device's description, the
driver version) is read once per process.

The answer is a TrialResult written as JSON to the result file (stdout belongs to the
user's code, which may print). Failures are data: `oom`, `cuda_error`, `error`,
`bad_target`, each with a one-line message.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib
import json
import os
import platform
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpudoctor.base.fsutil import write_atomic
from gpudoctor.sweep import records
from gpudoctor.sweep.gpu_sampler import GpuWindowSampler, driver_version
from gpudoctor.sweep.measure import (
    CudaEventTimer,
    PerfCounterTimer,
    Timer,
    WarmupRule,
    fit_check,
    timed_loop,
    warm_up,
)
from gpudoctor.sweep.records import FitCheck, Memory, TrialResult, TrialSpec
from gpudoctor.sweep.stability import DEFAULT_MIN_TIME_S, StabilityRule
from gpudoctor.sweep.steps import prepare
from gpudoctor.sweep.target import TargetProblem, load_target

OOM_MARKERS = ("out of memory", "can't allocate memory", "CUBLAS_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation")
# Errors after which the CUDA context is unusable: report them, never retry them blindly.
STICKY_MARKERS = (
    "CUDA error",
    "illegal memory access",
    "device-side assert",
    "unspecified launch failure",
    "misaligned address",
    "illegal instruction",
    "CUBLAS_STATUS_EXECUTION_FAILED",
    "CUDNN_STATUS_EXECUTION_FAILED",
    "CUDNN_STATUS_INTERNAL_ERROR",
)


def classify(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    if name == "OutOfMemoryError" or isinstance(exc, MemoryError) or any(m in text for m in OOM_MARKERS):
        return records.OOM
    if name == "AcceleratorError" or any(m in text for m in STICKY_MARKERS):
        return records.CUDA_ERROR
    return records.ERROR


def one_line(exc: BaseException, limit: int = 300) -> str:
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resolve_device(name: str, torch: Any) -> Any:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise TargetProblem(f"--device {name}: {exc}", "usage") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise TargetProblem(f"--device {name}: torch {torch.__version__} sees no CUDA GPU", "usage")
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise TargetProblem(f"--device {name}: only {torch.cuda.device_count()} GPU(s) visible", "usage")
        device = torch.device("cuda", index)
    elif device.type != "cpu":
        raise TargetProblem(f"--device {name}: only cpu and cuda are supported", "usage")
    return device


def describe(device: Any, torch: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(device, environment) for the report; read once per process and device."""
    key = str(device)
    if key not in _DESCRIBED:
        _DESCRIBED[key] = _describe(device, torch)
    return copy.deepcopy(_DESCRIBED[key])


_DESCRIBED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}


def _describe(device: Any, torch: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": _platform_name(),
        "cpu_count": os.cpu_count(),
    }
    if device.type != "cuda":
        # platform.machine(), not processor(): on Linux that runs `uname -p` in a subprocess
        # and says "unknown" (or the machine) anyway
        return {"type": "cpu", "name": platform.machine()}, env
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    env.update(cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(), driver=_driver_version())
    info = {
        "type": "cuda",
        "index": device.index,
        "name": props.name,
        "uuid": str(uuid) if uuid is not None else None,
        "capability": f"{props.major}.{props.minor}",
        "total_memory_bytes": props.total_memory,
        "multiprocessors": props.multi_processor_count,
    }
    return info, env


def _platform_name() -> str:
    """platform.platform(terse=True) without its `uname -p` subprocess on Linux (the
    processor field it asks for only appears there when it differs from the machine)."""
    uname = os.uname()
    if uname.sysname != "Linux":
        return platform.platform(terse=True)
    libc, version = platform.libc_ver()
    return "-".join(part for part in (uname.sysname, uname.release, uname.machine, "with", libc + version) if part)


@functools.cache
def _driver_version() -> str | None:
    return driver_version()  # an NVML init and shutdown: once per process


def peak_rss_bytes() -> int:
    """The process's peak resident set since it started or since the last reset_peak_rss()."""
    high_water = _status_kib("VmHWM")
    if high_water is not None:
        return high_water * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def _status_kib(name: str) -> int | None:
    """A `kB` line of /proc/self/status (Linux), else None."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak_rss() -> bool:
    """Start a new peak resident set from the current one (Linux 4.0+); False: not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")  # 5: reset the peak RSS (VmHWM) to the current RSS
    except OSError:
        return False
    return _status_kib("VmHWM") is not None


def _fill_memory(memory: Memory, device: Any, torch: Any) -> None:
    if device is None or device.type != "cuda":
        memory.peak_rss_bytes = peak_rss_bytes()
        for name in ("peak_allocated_bytes", "peak_reserved_bytes", "alloc_retries"):
            memory.unavailable[name] = "CPU run: no caching-allocator statistics (peak_rss_bytes instead)"
        return
    try:
        memory.peak_allocated_bytes = int(torch.cuda.max_memory_allocated(device))
        memory.peak_reserved_bytes = int(torch.cuda.max_memory_reserved(device))
        memory.alloc_retries = int(torch.cuda.memory_stats(device).get("num_alloc_retries", 0))
    except Exception as exc:  # noqa: BLE001  (after a sticky error the allocator may refuse to answer)
        memory.unavailable["peak_allocated_bytes"] = one_line(exc)


def run_trial(spec: TrialSpec) -> TrialResult:
    """Load, warm up and measure one batch size, in this process. Never raises."""
    started = time.perf_counter()
    result = TrialResult(batch_size=spec.batch_size, status=records.OK)
    torch: Any = None
    device: Any = None
    clock = _PhaseClock(result.phase_s)
    phase = clock.enter("load")
    try:
        torch = importlib.import_module("torch")
        device = resolve_device(spec.device, torch)
        result.device, result.environment = describe(device, torch)
        if device.type == "cuda":
            torch.cuda.set_device(device)
            free, total = torch.cuda.mem_get_info(device)
            result.memory.free_at_start_bytes, result.memory.capacity_bytes = int(free), int(total)
        else:
            import psutil

            result.memory.capacity_bytes = int(psutil.virtual_memory().total)
            result.memory.free_at_start_bytes = int(psutil.virtual_memory().available)
        phase = clock.enter("build")
        target = load_target(spec.target, spec.batch_size, spec.input_shape, torch)
        prepared = prepare(target, spec.mode, spec.batch_size, device, spec.dtype, spec.compile, torch)
        result.memory.model_bytes = prepared.model_bytes
        result.environment["notes"] = prepared.notes
        timer: Timer = (
            CudaEventTimer(torch, device, sync_each=spec.mode == "infer")
            if device.type == "cuda"
            else PerfCounterTimer()
        )
        if spec.fit_check_steps > 0:  # only whether it fits: a few steps to the peak memory, untimed
            phase = clock.enter("fit_check")
            _check_fit(spec, prepared.step, timer, device, torch, result)
        else:
            phase = clock.enter("warmup")
            warmup = warm_up(prepared.step, timer, WarmupRule(min_iters=spec.warmup_min_iters,
                                                              min_s=spec.warmup_min_s, max_s=spec.warmup_max_s))
            phase = clock.enter("measure")
            _measure(spec, prepared.step, timer, device, result, warmup)
    except TargetProblem as exc:
        result.status, result.error_code, result.message = records.BAD_TARGET, exc.category, str(exc)
    except Exception as exc:  # noqa: BLE001  (the target's own failure is a result, not a crash)
        result.status, result.message = classify(exc), one_line(exc)
    finally:
        if result.status != records.OK:
            result.phase = phase
        if torch is not None and result.status != records.CUDA_ERROR:
            _fill_memory(result.memory, device, torch)
        clock.enter(None)
        result.duration_s = time.perf_counter() - started
    return result


def _measure(spec: TrialSpec, step: Any, timer: Timer, device: Any, result: TrialResult, warmup: Any) -> None:
    """The timed window, under the stability rule, with the GPU sampled meanwhile."""
    rule = StabilityRule(
        min_iters=spec.min_iters,
        min_time_s=spec.min_time_s or DEFAULT_MIN_TIME_S[device.type],
        max_time_s=spec.max_time_s,
        max_iters=spec.max_iters,
        rel_ci_target=spec.rel_ci_target,
        drift_target=spec.drift_target,
        tail_target=spec.tail_target,
    )
    sampler = _sampler(spec, device, result)
    try:
        result.timing = timed_loop(step, timer, rule, spec.batch_size, warmup)
    finally:
        if sampler is not None:
            result.gpu = sampler.stop()


def _check_fit(spec: TrialSpec, step: Any, timer: Timer, device: Any, torch: Any, result: TrialResult) -> None:
    """A fit check: `spec.fit_check_steps` steps, cuDNN autotuning as the spec says."""
    result.gpu_unavailable = "fit check: no timed window"
    with _cudnn_benchmark(torch, device, spec.fit_check_cudnn_benchmark) as (running, target_set):
        result.fit_check = FitCheck(spec.fit_check_steps, running, target_set, _fit_note(running, target_set))
        result.timing = fit_check(step, timer, spec.fit_check_steps, spec.batch_size)


@contextlib.contextmanager
def _cudnn_benchmark(torch: Any, device: Any, wanted: bool | None) -> Iterator[tuple[bool | None, bool | None]]:
    """torch.backends.cudnn.benchmark set to `wanted` (None: as the target left it) for a
    fit check, and back to the target's setting afterwards, also when the check fails.
    Yields (the setting the check runs with, the target's); (None, None) without cuDNN."""
    cudnn = getattr(getattr(torch, "backends", None), "cudnn", None)
    if device.type != "cuda" or cudnn is None or not cudnn.is_available():
        yield None, None
        return
    target_set = bool(cudnn.benchmark)
    running = target_set if wanted is None else wanted
    cudnn.benchmark = running
    try:
        yield running, target_set
    finally:
        cudnn.benchmark = target_set


def _fit_note(running: bool | None, target_set: bool | None) -> str:
    if target_set and not running:
        return ("cuDNN autotuning (cudnn.benchmark, which the target turns on) off for this fit check: the same "
                "memory edge and peak within 2% on an H200, without the autotuning's 18-24 s at a new shape")
    if running:
        return "cuDNN autotuning on, as the target set it"
    return "as the target set it"


class _PhaseClock:
    """Seconds spent in each phase of a trial, written into `into` as each one ends."""

    def __init__(self, into: dict[str, float]) -> None:
        self._into = into
        self._phase: str | None = None
        self._since = time.perf_counter()

    def enter(self, phase: str | None) -> str:
        now = time.perf_counter()
        if self._phase is not None:
            self._into[self._phase] = round(now - self._since, 4)
        self._phase, self._since = phase, now
        return phase or ""


def _sampler(spec: TrialSpec, device: Any, result: TrialResult) -> GpuWindowSampler | None:
    if device.type != "cuda":
        result.gpu_unavailable = "CPU run"
        return None
    if not spec.sample_gpu:
        result.gpu_unavailable = "GPU sampling disabled"
        return None
    sampler = GpuWindowSampler(result.device.get("uuid"))
    sampler.start()
    return sampler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpudoctor.sweep.trial")
    parser.add_argument("--spec", required=True, type=Path, help="TrialSpec JSON file")
    parser.add_argument("--result", required=True, type=Path, help="where to write the TrialResult JSON")
    args = parser.parse_args(argv)
    try:
        spec = TrialSpec.from_dict(json.loads(args.spec.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        print(f"gpudoctor sweep trial: bad spec {args.spec}: {exc}", file=sys.stderr)
        return 2
    result = run_trial(spec)
    write_atomic(args.result, json.dumps(result.to_dict()).encode())
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: after a sticky CUDA error, torch's exit hooks can hang
    # or abort on the broken context, and the answer is already written.
    os._exit(code)
