"""`gpudoctor diagnose`: run a workload under the supervisor and report why the GPU idles.

    gpudoctor diagnose train.py --lr 0.1        (same as: -- python train.py --lr 0.1)
    gpudoctor diagnose -m mypkg.train
    gpudoctor diagnose -- torchrun --nproc-per-node 1 train.py
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import sys
from pathlib import Path

from gpudoctor import exitcodes
from gpudoctor.commands.argtypes import non_negative_int, positive_float, positive_int
from gpudoctor.exitcodes import GpudoctorError

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagnose",
        help="run a PyTorch script/command and diagnose why its GPU idles",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_options(p)
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
    g.add_argument("--interval", type=positive_float, default=0.5, metavar="SECONDS",
                   help="CPU and GPU sampling interval (default 0.5)")
    g.add_argument("--no-profile", action="store_true", help="do not open a torch.profiler window")
    g.add_argument("--profile-steps", type=positive_int, default=10, metavar="N",
                   help="steps in the profiler window (default 10)")
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


def add_output_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("reports")
    g.add_argument("--out", metavar="PATH",
                   help="report directory or file stem (default gpudoctor-reports/<script>-<time>)")
    g.add_argument("--json", dest="json_path", metavar="PATH", help="also write the JSON report here")
    g.add_argument("--format", dest="formats", action="append", default=[],
                   choices=["html", "json", "markdown", "junit"],
                   help="extra report formats to write beside the HTML/JSON (markdown, junit)")
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
        return _check_executable(command), Path(command[-1] if command[0] in _LAUNCHERS else command[0]).stem or "run"
    if not target:
        raise GpudoctorError("what should I run? e.g. gpudoctor diagnose train.py, -m pkg.train, or -- COMMAND",
                             exitcodes.USAGE)
    script = target[0]
    path = Path(script)
    if script.startswith("-"):
        raise GpudoctorError(f"unknown option {script} (put the command after --)", exitcodes.USAGE)
    if not path.exists():
        raise GpudoctorError(f"no such file: {script}", exitcodes.NOT_FOUND)
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


_LAUNCHERS = {"torchrun", "python", "python3", "accelerate", "deepspeed"}


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


def run(args: argparse.Namespace) -> int:
    from gpudoctor.pipeline import diagnose_and_report

    command, stem = resolve_command(args)
    return diagnose_and_report(args, command, stem)
