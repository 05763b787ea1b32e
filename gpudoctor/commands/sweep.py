"""`gpudoctor sweep`: measure throughput and latency against batch size; find the knee and
the memory edge (playbook steps 2 and 4).

    gpudoctor sweep mymodels.py:build --mode infer --latency-p50-ms 100
    gpudoctor sweep mymodels.py:build --mode train --batch-sizes 8,16,32,64,128
    gpudoctor sweep mymodels.py:Net --mode infer --input-shape 3,224,224

TARGET is FILE.py:FUNCTION where FUNCTION(batch_size=None) returns (model, make_batch),
a dict, or gpudoctor.sweep.SweepTarget; or FILE.py:ModuleClass with --input-shape.
Sizes far from the memory edge share one process; near it, and after any failure, each
size runs in a fresh process. Details: docs/sweep.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.commands.argtypes import positive_float, positive_int

if TYPE_CHECKING:
    from gpudoctor.sweep.sweep_model import SweepReport

log = logging.getLogger(__name__)

TARGET_FAILED = 1  # the target failed (CUDA error, crash) or no size ran; reports are still written
INTERRUPTED = 130
CATEGORY_CODES = {
    "usage": exitcodes.USAGE,
    "bad_data": exitcodes.BAD_DATA,
    "not_found": exitcodes.NOT_FOUND,
    "not_runnable": exitcodes.NOT_RUNNABLE,
}






def _int_list(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers like 8,16,32: {text!r}")
    return tuple(positive_int(p) for p in parts)


def _headroom(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1), e.g. 0.1: {text!r}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep",
        help="measure throughput/latency vs batch size: the knee and the memory edge",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", help="FILE.py:FUNCTION, FILE.py:ModuleClass or package.module:FUNCTION")
    p.add_argument(
        "--mode", required=True, choices=["infer", "train"], help="inference (forward only) or a training step"
    )
    g = p.add_argument_group("batch sizes")
    g.add_argument("--batch-sizes", type=_int_list, metavar="A,B,C", help="measure exactly these sizes")
    g.add_argument("--start", type=positive_int, default=1, metavar="N", help="search: first size (default 1)")
    g.add_argument(
        "--max-batch", type=positive_int, default=4096, metavar="N", help="search: size limit (default 4096)"
    )
    g.add_argument("--no-bisect", action="store_true",
                   help="search: double in full to the first OOM; no edge search past the knee or after it")
    g.add_argument("--no-edge-prediction", action="store_true",
                   help="search: measure every doubling size in full to the first OOM, then bisect by midpoints "
                        "(default: past the knee, jump to the edge predicted from the measured peaks, probing "
                        "memory only)")
    g = p.add_argument_group("target")
    g.add_argument("--input-shape", type=_int_list, metavar="C,H,W", help="shape of one sample, for a plain nn.Module")
    g.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda or cuda:N (default auto)")
    g.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                   help="float32, or autocast to bfloat16/float16 (default float32)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (compiled again at every size)")
    g = p.add_argument_group("targets and limits")
    g.add_argument("--latency-p50-ms", type=positive_float, metavar="MS",
                   help="p50 latency budget: the search stops above it; online advice respects it")
    g.add_argument("--headroom", type=_headroom, default=0.1, metavar="FRACTION",
                   help="memory to keep free when judging what fits (default 0.1)")
    g = p.add_argument_group("measurement")
    g.add_argument("--min-time-s", type=positive_float, metavar="S",
                   help="least measured time per size (default 1 on GPU, 0.5 on CPU)")
    g.add_argument("--max-time-s", type=positive_float, default=10.0, metavar="S",
                   help="timed-loop cap per size; the size is marked not stable (default 10)")
    g.add_argument(
        "--min-iters", type=positive_int, default=20, metavar="N", help="least timed iterations (default 20)"
    )
    g.add_argument("--warmup-s", type=float, default=0.2, metavar="S",
                   help="least warm-up time per size, after at least 3 iterations (default 0.2)")
    g.add_argument("--trial-timeout-s", type=positive_float, default=600.0, metavar="S",
                   help="end a size's process after this long (default 600)")
    g.add_argument("--no-gpu-sampling", action="store_true", help="do not read NVML (utilization, SM activity, power)")
    g.add_argument("--fresh-process-per-size", action="store_true",
                   help="run every size in a new process (default: one process for the sizes far from the memory "
                        "edge, a new one for each size near it)")
    g = p.add_argument_group("reports")
    g.add_argument("--out", metavar="PATH",
                   help="report directory or file stem (default gpudoctor-reports/sweep-<target>-<mode>-<time>)")
    g.add_argument("--json", dest="json_path", metavar="PATH", help="also write the JSON report here ('-': stdout)")
    g.add_argument("--html", dest="html_path", metavar="PATH", help="also write the HTML report here")
    g.add_argument("--force", action="store_true", help="overwrite existing report files")
    g.add_argument("--quiet", action="store_true", help="no progress lines and no table (files are still written)")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    if args.batch_sizes and (args.start != 1 or args.max_batch != 4096):
        raise GpudoctorError("give either --batch-sizes or --start/--max-batch, not both", exitcodes.USAGE)
    if args.start > args.max_batch:
        raise GpudoctorError(f"--start {args.start} is above --max-batch {args.max_batch}", exitcodes.USAGE)
    if args.warmup_s < 0:
        raise GpudoctorError("--warmup-s must not be negative", exitcodes.USAGE)
    if args.min_time_s and args.min_time_s > args.max_time_s:
        raise GpudoctorError("--min-time-s is above --max-time-s", exitcodes.USAGE)
    device = args.device
    if not (device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
        raise GpudoctorError(f"--device {device!r}: expected auto, cpu, cuda or cuda:N", exitcodes.USAGE)


def _html_copy(path: str | None, force: bool) -> Path | None:
    """Check `--html PATH` up front, the way plan_outputs checks the rest."""
    from gpudoctor.verdict.output import ensure_writable

    if not path:
        return None
    target = Path(path)
    if target.is_dir() or path.endswith(("/", os.sep)):
        raise GpudoctorError(f"--html {path}: expected a file path, not a directory", exitcodes.USAGE)
    ensure_writable(target.parent if str(target.parent) else Path("."))
    if os.path.lexists(target) and not force:
        raise GpudoctorError(f"{target} already exists; nothing was overwritten (or --force)", exitcodes.OUTPUT_EXISTS)
    return target


def run(args: argparse.Namespace) -> int:
    from gpudoctor.sweep.records import TrialSpec
    from gpudoctor.sweep.search import SearchPlan
    from gpudoctor.sweep.target import TargetProblem, parse_target_spec, precheck
    from gpudoctor.verdict.output import plan_outputs

    _check(args)
    try:
        spec = parse_target_spec(args.target)
        precheck(spec, args.input_shape)
    except TargetProblem as exc:
        raise GpudoctorError(str(exc), CATEGORY_CODES[exc.category]) from None
    to_stdout = args.json_path == "-"
    paths = plan_outputs(
        args.out, f"sweep-{spec.name}-{args.mode}", datetime.now(), ("html", "json"), force=args.force,
        json_path=None if to_stdout else args.json_path, session=False, trace=False,
    )
    html_copy = _html_copy(args.html_path, args.force)
    base = TrialSpec(
        target=args.target, mode=args.mode, batch_size=args.start, input_shape=args.input_shape,
        device=args.device, dtype=args.dtype, compile=args.compile, warmup_min_s=args.warmup_s,
        min_iters=args.min_iters, min_time_s=args.min_time_s, max_time_s=args.max_time_s,
        sample_gpu=not args.no_gpu_sampling,
    )
    plan = SearchPlan(
        start=args.start, max_batch=args.max_batch, batch_sizes=args.batch_sizes,
        latency_p50_budget_s=args.latency_p50_ms / 1e3 if args.latency_p50_ms else None, bisect=not args.no_bisect,
        predict_edge=not getattr(args, "no_edge_prediction", False),
    )
    report = _sweep(args, base, plan)
    return _finish(args, report, paths, html_copy, to_stdout)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """A batch scheduler's SIGTERM (a job's time limit, `timeout`) ends the sweep like
    Ctrl-C: the running trial is stopped and what was measured is still reported."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (an embedding program): leave its handler alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _sweep(args: argparse.Namespace, base: Any, plan: Any) -> SweepReport:
    from gpudoctor.sweep.report import build_sweep_report
    from gpudoctor.sweep.reuse import ReusePolicy
    from gpudoctor.sweep.runner import SubprocessRunner
    from gpudoctor.sweep.search import TargetRejected, run_search

    started = time.perf_counter()
    say: Callable[[str], None] = ((lambda text: None) if args.quiet
                                  else (lambda text: print(text, file=sys.stderr, flush=True)))
    fresh = getattr(args, "fresh_process_per_size", False)
    processes = "one process per size" if fresh else "one process per size near the memory edge, one shared far from it"
    with tempfile.TemporaryDirectory(prefix="gpudoctor-sweep-") as workdir, _sigterm_as_interrupt():
        say(f"gpudoctor sweep: {args.target} --mode {args.mode} ({plan.mode}; {processes})")
        runner = SubprocessRunner(
            base, Path(workdir), args.trial_timeout_s, probe_base=probe_spec(base),
            reuse=None if fresh else ReusePolicy.for_headroom(args.headroom),
        )
        try:
            with runner:  # one trial process at a time: the probes run through it too
                outcome = run_search(plan, runner, progress=lambda r: say(progress_line(r)), probe_runner=runner.probe)
        except TargetRejected as exc:
            code = CATEGORY_CODES.get(exc.result.error_code or "", exitcodes.BAD_DATA)
            raise GpudoctorError(str(exc), code) from None
    reused = sum(1 for t in outcome.trials if t.process_reused)
    ran = sum(1 for t in outcome.trials if t.process_reused is not None)
    probed = sum(1 for t in outcome.trials if t.fit_probe)
    shared = f"{reused} of {ran} in a reused process" if reused else ""
    counts = ", ".join(part for part in (f"{ran} sizes run", f"{probed} as fit probes" if probed else "", shared)
                       if part)
    say(f"gpudoctor sweep: {outcome.stop_reason} ({counts})")
    return build_sweep_report(
        target=args.target, spec=base, plan=plan, outcome=outcome, headroom=args.headroom,
        command=command_line(args),
        duration_s=time.perf_counter() - started,
    )


# A fit probe (a size past the knee, searched for the memory edge) runs as a fit check: the
# first step (where autotuners and workspaces allocate) and two more (the optimizer's state,
# made in the first step's update, is held through them), each synchronised; no warm-up
# rule, no timed window. On an H200 (ResNet-50 fp32 training, 1472 and 1664) the peak
# reserved memory was reached by the third step. cuDNN autotuning is off for the check
# (back on afterwards if the target set it): the same memory edge (1664 fits, 1728 does
# not, with and without it) and a peak within 2%, without its 18-24 s at each new shape.
FIT_CHECK_STEPS = 3


def probe_spec(base: Any) -> Any:
    """The trial settings of a fit probe, from the sweep's own."""
    import dataclasses

    return dataclasses.replace(base, fit_check_steps=FIT_CHECK_STEPS, fit_check_cudnn_benchmark=False)


# (flag, attribute, default): what the command line says, for the report
_OPTIONS = (
    ("--batch-sizes", "batch_sizes", None), ("--start", "start", 1), ("--max-batch", "max_batch", 4096),
    ("--input-shape", "input_shape", None), ("--device", "device", "auto"), ("--dtype", "dtype", "float32"),
    ("--latency-p50-ms", "latency_p50_ms", None), ("--headroom", "headroom", 0.1),
    ("--min-time-s", "min_time_s", None), ("--max-time-s", "max_time_s", 10.0), ("--min-iters", "min_iters", 20),
    ("--warmup-s", "warmup_s", 0.2),
)
_FLAGS = (("--compile", "compile"), ("--no-bisect", "no_bisect"), ("--no-edge-prediction", "no_edge_prediction"),
          ("--no-gpu-sampling", "no_gpu_sampling"), ("--fresh-process-per-size", "fresh_process_per_size"))


def command_line(args: argparse.Namespace) -> list[str]:
    """The sweep's settings as a command line (rebuilt: sys.argv may be a test runner's)."""
    argv = ["gpudoctor", "sweep", args.target, "--mode", args.mode]
    for flag, name, default in _OPTIONS:
        value = getattr(args, name, None)
        if value is not None and value != default:
            argv += [
                flag,
                ",".join(map(str, value))
                if isinstance(value, tuple)
                else f"{value:g}"
                if isinstance(value, float)
                else str(value),
            ]
    argv += [flag for flag, name in _FLAGS if getattr(args, name, False)]
    return argv


def progress_line(result: Any) -> str:
    """One stderr line per size, as soon as it is measured."""
    from gpudoctor.metrics import format_bytes
    from gpudoctor.reports.sweep_view import short_message

    head = f"  batch {result.batch_size:>6}: "
    if not result.ok:
        short = short_message(result.status, result.message or "")
        if result.status == "oom":
            return head + short
        return head + f"{result.status}" + (f" ({short})" if short else "")
    if result.fit_probe:
        peak = result.memory.peak_bytes
        fits = "fits" + (f" (peak {format_bytes(peak)})" if peak is not None else "")
        check = result.fit_check
        if check is not None:
            steps = f"{check.steps} steps, not timed" + (", cuDNN autotuning off" if check.cudnn_benchmark_target
                                                          and not check.cudnn_benchmark else "")
            return head + fits + f", a fit check past the knee (memory only: {steps})"
        return head + fits + ", a fit probe past the knee (memory only, throughput not measured)"
    t = result.timing
    peak = result.memory.peak_bytes
    rate = f"{t.samples_per_s:,.0f}" if t.samples_per_s >= 100 else f"{t.samples_per_s:.3g}"
    parts = [f"{rate} samples/s", f"p50 {t.latency_p50_s * 1e3:.3g} ms"]
    if peak is not None:
        parts.append(f"peak {format_bytes(peak)}")
    if result.gpu is not None and result.gpu.sm_activity_percent is not None:
        parts.append(f"SM {result.gpu.sm_activity_percent:.0f}%")
    parts.append(f"{'stable' if t.stable else 'NOT stable'}, {t.iterations} iterations")
    return head + ", ".join(parts)


def _finish(
    args: argparse.Namespace, report: SweepReport, paths: Any, html_copy: Path | None, to_stdout: bool
) -> int:
    from gpudoctor.base.fsutil import write_atomic
    from gpudoctor.reports import sweep_html, sweep_terminal
    from gpudoctor.reports.console import output_console
    from gpudoctor.verdict.output import write_outputs

    def render(data: Any, fmt: str) -> str:
        return sweep_html.render(data) if fmt == "html" else json.dumps(data, indent=1, allow_nan=False)

    written = write_outputs(paths, report.to_dict(), None, render=render)
    files = {kind: str(path) for kind, path in written.files.items()}
    if html_copy is not None:
        try:
            write_atomic(html_copy, render(written.report, "html").encode("utf-8"), exclusive=not args.force)
        except FileExistsError:
            raise GpudoctorError(
                f"{html_copy} appeared meanwhile; nothing was overwritten", exitcodes.OUTPUT_EXISTS
            ) from None
        except OSError as exc:
            raise GpudoctorError(f"cannot write {html_copy}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE) from None
        files["html_copy"] = str(html_copy)
    if to_stdout:
        sys.stdout.write(json.dumps(written.report, indent=1, allow_nan=False) + "\n")
    if not args.quiet:
        stream = sys.stderr if to_stdout else sys.stdout
        console = output_console(stream, highlight=False)  # a pipe or a CI log: the width every command uses
        sweep_terminal.render(written.report, console, written=files)
    if report.interrupted:
        return INTERRUPTED
    if report.failed or not any(t.status == "ok" for t in report.trials):
        return TARGET_FAILED
    return exitcodes.OK
