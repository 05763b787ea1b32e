"""`gpudoctor diagnose`: run a workload under the supervisor and report why the GPU idles.

    gpudoctor diagnose train.py --lr 0.1        (same as: -- python train.py --lr 0.1)
    gpudoctor diagnose -m mypkg.train
    gpudoctor diagnose -- torchrun --nproc-per-node 1 train.py
    gpudoctor diagnose --try --steps 200 train.py       (then re-run once per remedy, measured)
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import logging
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.base.fsutil import unreadable_reason
from gpudoctor.commands.argtypes import (
    float_between,
    non_negative_int,
    positive_float,
    positive_int,
    split_ids,
)
from gpudoctor.reports.formats import DEFAULT_FILE_FORMATS, choices

if TYPE_CHECKING:
    from gpudoctor.pipeline import Misplaced, ReportOptions
    from gpudoctor.run.supervisor import RunOptions

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.05  # below this the samplers would spin (and GPM needs 0.1 s between samples)
MAX_INTERVAL_S = 60.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "diagnose",
        help="run a PyTorch script/command and diagnose why its GPU idles",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_options(p)
    add_try_options(p)
    add_output_options(p)
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ...",
                   help="run a module (like python -m MODULE ...)")
    p.add_argument("target", nargs=argparse.REMAINDER, metavar="SCRIPT_OR_--_COMMAND",
                   help="a Python script and its arguments, or -- followed by any command")
    p.set_defaults(func=run)


def add_run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("run control")
    g.add_argument("--duration", type=positive_float, metavar="SECONDS",
                   help="stop the workload gracefully after this long, then report")
    g.add_argument("--steps", type=positive_int, metavar="N", help="stop after N training steps, then report")
    g.add_argument("--grace", type=positive_float, default=10.0, metavar="SECONDS",
                   help="after the stop signal (SIGINT), wait this long before SIGTERM (default 10)")
    g.add_argument("--interval", type=float_between(MIN_INTERVAL_S, MAX_INTERVAL_S, " s"), default=0.5,
                   metavar="SECONDS",
                   help=f"CPU and GPU sampling interval, {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g} (default 0.5)")
    g.add_argument("--no-profile", action="store_true", help="do not open a torch.profiler window")
    g.add_argument("--profile-steps", type=positive_int, default=None, metavar="N",
                   help="steps in the profiler window (default 10, or fewer, at least 3, once 2 s of steps slower "
                        "than 0.2 s ran; N given: N)")
    g.add_argument("--warmup-steps", type=non_negative_int, default=5, metavar="N",
                   help="steps before the profiler window opens (default 5)")
    g.add_argument("--stepless-after", type=positive_float, default=3.0, metavar="SECONDS",
                   help="a run with no step boundary gets a time-bounded profiler window this long after "
                        "CUDA starts (default 3)")
    g.add_argument("--stepless-window", type=positive_float, default=2.0, metavar="SECONDS",
                   help="length of that time-bounded window (default 2)")
    g.add_argument("--profile-windows", type=positive_int, default=4, metavar="N",
                   help="profiler windows at most: the start of steady state, each new phase (an evaluation "
                        "loop, another DataLoader), one later (default 4)")
    g.add_argument("--profile-later", type=positive_float, default=60.0, metavar="SECONDS",
                   help="the later window opens at least this long after the first, at a new epoch (default 60)")
    g.add_argument("--no-loader-profile", action="store_true",
                   help="do not profile where a DataLoader process spends its time when the loop waits for data")
    g.add_argument("--data", action="append", default=[], metavar="PATH",
                   help="dataset location to probe (found automatically when the Dataset has a root path)")


def add_try_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("measure the remedies (see docs/try.md)")
    g.add_argument("--try", dest="try_all", action="store_true",
                   help="after the diagnosis, re-run the workload once per remedy that can be applied from "
                        "outside the code (DataLoader workers/pinning, TF32, cudnn.benchmark, "
                        "expandable_segments) under the same --steps/--duration, and report what each measured")
    g.add_argument("--try-only", dest="try_only", metavar="REMEDIES",
                   help="like --try, with these remedies only (comma-separated): workers[=N], pin_memory, "
                        "persistent_workers, prefetch[=N], tf32, cudnn_benchmark, expandable_segments, "
                        "compile[=BACKEND] (opt-in), auto (every applicable one)")
    g.add_argument("--try-in-place", dest="try_in_place", action="store_true",
                   help="run the trials in the working directory itself, not in a scratch copy of it: needed when "
                        "the script writes outside its working directory (the trials then change your files)")


def add_output_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("reports")
    g.add_argument("--out", metavar="PATH",
                   help="report directory or file stem (default gpudoctor-reports/<script>-<time>)")
    g.add_argument("--json", dest="json_path", metavar="PATH", help="also write the JSON report here")
    g.add_argument("--format", dest="formats", action="append", default=[], choices=choices(files_only=True),
                   metavar="FMT", help=f"{'|'.join(choices(files_only=True))} (repeatable); "
                   f"{' and '.join(DEFAULT_FILE_FORMATS)} are always written")
    g.add_argument("--ignore", action="append", default=[], metavar="ID",
                   help="silence a check (GD301 or its slug); repeat or comma-separate")
    g.add_argument("--fail-on", choices=["warning", "critical"],
                   help="exit 3 when the workload succeeded but findings reach this severity")
    g.add_argument("--force", action="store_true", help="overwrite existing report files")
    g.add_argument("--quiet", action="store_true", help="no terminal summary (files are still written)")








def resolve_command(args: argparse.Namespace) -> tuple[list[str], str]:
    """The command to run and a short name for the report file. Raises GpudoctorError."""
    if args.module is not None:
        if not args.module:
            raise GpudoctorError("-m needs a module name", exitcodes.USAGE)
        if args.target:
            raise GpudoctorError("give either -m MODULE or a script, not both", exitcodes.USAGE)
        module = args.module[0]
        top = module.split(".")[0]
        sys.path.insert(0, os.getcwd())
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        finally:
            sys.path.pop(0)
        if not found:
            raise GpudoctorError(f"no module named {top!r} (from the current directory or the environment)",
                                 exitcodes.NOT_FOUND)
        return [sys.executable, "-m", *args.module], module.split(".")[-1]
    target = list(args.target or [])
    if target and target[0] == "--":
        command = target[1:]
        if not command:
            raise GpudoctorError("nothing to run after --", exitcodes.USAGE)
        return _check_executable(command), report_stem(command)
    if not target:
        raise GpudoctorError("what should I run? e.g. gpudoctor diagnose train.py, -m pkg.train, or -- COMMAND",
                             exitcodes.USAGE)
    script = target[0]
    path = Path(script)
    if script.startswith("-"):
        raise GpudoctorError(f"unknown option {script} (put the command after --)", exitcodes.USAGE)
    try:
        path.stat()
    except OSError as exc:
        missing = exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR)
        raise GpudoctorError(f"{unreadable_reason(exc)}: {script}",
                             exitcodes.NOT_FOUND if missing else exitcodes.NOT_RUNNABLE) from None
    if path.is_dir():
        if (path / "__main__.py").is_file():
            return [sys.executable, script, *target[1:]], path.resolve().name
        raise GpudoctorError(f"{script} is a directory, not a Python script", exitcodes.NOT_RUNNABLE)
    if not _looks_like_python(path):
        raise GpudoctorError(
            f"{script} is not a Python script (to run another command: gpudoctor diagnose -- {script} ...)",
            exitcodes.NOT_RUNNABLE,
        )
    return [sys.executable, script, *target[1:]], path.stem


def report_stem(command: list[str]) -> str:
    """The report's name for a command: its script or module (`-- python train.py name 12`
    gives `train`, not `12`), else the program's name."""
    from gpudoctor.diff.compare import workload_identity

    identity = workload_identity(command)
    if identity is None:
        return Path(command[0]).stem or "run"
    kind, name = identity.split(":", 1)
    if kind == "module":
        return name.rsplit(".", 1)[-1] or "run"
    return Path(name).stem or "run"


def _looks_like_python(path: Path) -> bool:
    if path.suffix in (".py", ".pyw"):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError as exc:
        raise GpudoctorError(f"cannot read {path}: {exc.strerror}", exitcodes.NOT_RUNNABLE) from None
    return head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]


def _check_executable(command: list[str]) -> list[str]:
    program = command[0]
    if os.sep in program:
        path = Path(program)
        if not path.exists():
            raise GpudoctorError(f"no such file: {program}", exitcodes.NOT_FOUND)
        if path.is_dir():
            raise GpudoctorError(f"{program} is a directory, not a command", exitcodes.NOT_RUNNABLE)
        if not os.access(path, os.X_OK):
            if _looks_like_python(path):
                return [sys.executable, *command]
            raise GpudoctorError(f"{program} is not executable", exitcodes.NOT_RUNNABLE)
        return command
    if shutil.which(program) is None:
        raise GpudoctorError(f"command not found: {program}", exitcodes.NOT_FOUND)
    return command


def own_options() -> dict[str, bool]:
    """gpudoctor diagnose's long options (--duration, --steps, ...) -> whether they take a value."""
    parser = argparse.ArgumentParser(add_help=False)
    add_run_options(parser)
    add_output_options(parser)
    return {o: action.nargs != 0 for action in parser._actions for o in action.option_strings if o.startswith("--")}


def misplaced_options(args: argparse.Namespace) -> Misplaced | None:
    """Not after `--`, where the command is spelled out on purpose."""
    from gpudoctor.pipeline import Misplaced

    if args.module is not None:
        head, script_args = ["-m", *args.module[:1]], list(args.module[1:])
    elif args.target and args.target[0] != "--":
        head, script_args = list(args.target[:1]), list(args.target[1:])
    else:
        return None
    ours = own_options()
    moved: list[str] = []
    kept: list[str] = []
    i = 0
    while i < len(script_args):
        arg = script_args[i]
        name = arg.split("=", 1)[0]
        if name in ours:
            takes_value = ours[name] and "=" not in arg and i + 1 < len(script_args)
            moved += script_args[i : i + 2] if takes_value else [arg]
            i += 2 if takes_value else 1
            continue
        kept.append(arg)
        i += 1
    if not moved:
        return None
    return Misplaced(moved, shlex.join(["gpudoctor", "diagnose", *moved, *head, *kept]))


def run_options(args: argparse.Namespace, command: list[str]) -> RunOptions:
    """What add_run_options' flags ask for (diagnose, preflight)."""
    from gpudoctor.run.supervisor import RunOptions

    return RunOptions(
        command=command,
        duration_s=args.duration,
        max_steps=args.steps,
        grace_s=args.grace,
        cpu_interval_s=args.interval,
        gpu_interval_s=args.interval,
        profile=not args.no_profile,
        profile_warmup_steps=args.warmup_steps,
        # --profile-steps N is what the user asked for: no budget cuts it short
        profile_steps=args.profile_steps if args.profile_steps is not None else 10,
        profile_window_budget_s=2.0 if args.profile_steps is None else 0.0,
        profile_no_step_after_s=args.stepless_after,
        profile_time_window_s=args.stepless_window,
        profile_warmup_s=1.0 if args.warmup_steps else 0.0,
        profile_max_windows=args.profile_windows,
        profile_later_s=args.profile_later,
        fetch_profile=not args.no_loader_profile,
        data_paths=list(args.data),
    )


def report_options(args: argparse.Namespace) -> ReportOptions:
    """What add_output_options' flags ask for (diagnose, demo)."""
    from gpudoctor.pipeline import ReportOptions

    return ReportOptions(out=args.out, json_path=args.json_path, formats=tuple(args.formats),
                         ignore=tuple(split_ids(args.ignore)), fail_on=args.fail_on, force=args.force,
                         quiet=args.quiet)


def run(args: argparse.Namespace) -> int:
    from gpudoctor.pipeline import DiagnoseRequest, diagnose_and_report
    from gpudoctor.trials.remedies import parse_try

    command, stem = resolve_command(args)
    misplaced = misplaced_options(args)
    request = DiagnoseRequest(run=run_options(args, command), stem=stem, report=report_options(args),
                              trials=parse_try(args.try_all, args.try_only), try_in_place=args.try_in_place)
    return diagnose_and_report(request, misplaced=misplaced)
