"""`gpudoctor preflight`: will this machine (and this job) keep the GPU busy? A checklist.

    gpudoctor preflight                                  machine audit, seconds, no workload
    gpudoctor preflight --json pf.json --html pf.html --junit pf.junit.xml
    gpudoctor preflight --policy gate.toml -- python train.py --epochs 1

With a command, the job also runs bounded (--steps, default 40; --duration, default
180 s) under `diagnose`, and the policy's thresholds ([tool.gpudoctor.preflight] in
the nearest pyproject.toml, or --policy FILE) become checklist items. Exit 0 when no
item fails, 3 when one does, 78 for a bad policy. Details: docs/preflight.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError

DEFAULT_STEPS = 40
DEFAULT_DURATION_S = 180.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from gpudoctor.commands.diagnose import add_run_options

    p = sub.add_parser("preflight", help="machine and job checklist before a run (CI gate)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("checklist")
    g.add_argument("--json", dest="pf_json", metavar="PATH", help="write the JSON checklist here ('-': stdout)")
    g.add_argument("--html", dest="pf_html", metavar="PATH", help="write the HTML checklist here")
    g.add_argument("--junit", dest="pf_junit", metavar="PATH", help="write a JUnit XML file (one test case per item)")
    g.add_argument("--policy", metavar="FILE", help="TOML thresholds (default: [tool.gpudoctor.preflight] in the "
                                                    "nearest pyproject.toml)")
    g.add_argument("--checkpoint-dir", default=".", metavar="DIR", help="where checkpoints go (free disk; default .)")
    g.add_argument("--ignore", action="append", default=[], metavar="ITEM",
                   help="leave an item out (PF403 or its slug shm-size; GD ids silence the job's checks); "
                        "repeat or comma-separate")
    g.add_argument("--strict", action="store_true", help="warnings and not-checked items fail too")
    g.add_argument("--list", action="store_true", help="print the items (ID, slug, group, title) and exit")
    g.add_argument("--force", action="store_true", help="overwrite existing output files")
    g.add_argument("--quiet", action="store_true", help="no terminal checklist (files are still written)")
    add_run_options(p)
    p.add_argument("--out", metavar="PATH", help="the job's diagnose reports: directory or file stem "
                                                 "(default gpudoctor-reports/<script>-<time>)")
    p.set_defaults(steps=DEFAULT_STEPS, duration=DEFAULT_DURATION_S)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="a job to run bounded under diagnose and judge by the policy")
    p.set_defaults(func=run)


def _output(path: str | None, force: bool) -> Path | None:
    """Check an output path up front, so a long job never ends with nowhere to write."""
    from gpudoctor.verdict.output import ensure_writable

    if not path or path == "-":
        return None
    target = Path(path)
    if target.is_dir() or path.endswith(("/", os.sep)):
        raise GpudoctorError(f"{path}: expected a file path, not a directory", exitcodes.USAGE)
    ensure_writable(target.parent if str(target.parent) else Path("."))
    if os.path.lexists(target) and not force:
        raise GpudoctorError(f"{target} already exists; nothing was overwritten (or --force)", exitcodes.OUTPUT_EXISTS)
    return target


def _split(values: list[str]) -> tuple[list[str], list[str]]:
    """--ignore values: (preflight items, diagnose checks). Unknown names are a usage error."""
    from gpudoctor.commands.argtypes import split_ids
    from gpudoctor.preflight.items import find
    from gpudoctor.verdict.registry import find_check

    items, checks = [], []
    for name in split_ids(values):
        if find(name) is not None:
            items.append(name)
        elif find_check(name) is not None:
            checks.append(name)
        else:
            raise GpudoctorError(f"--ignore {name}: no preflight item or check of that name "
                                 "(gpudoctor preflight --list, gpudoctor checks)", exitcodes.USAGE)
    return items, checks


def list_items() -> int:
    from gpudoctor.preflight.items import SPECS
    from gpudoctor.preflight.model import GROUPS

    for spec in SPECS.values():
        print(f"{spec.id}\t{spec.slug}\t{GROUPS[spec.group]}\t{spec.title}")
    return exitcodes.OK


def run(args: argparse.Namespace) -> int:
    """Check every input first (policy, outputs, --ignore, the command), then audit the
    machine, run the job, judge, write, show."""
    import dataclasses

    from gpudoctor.preflight import audit, job
    from gpudoctor.preflight import policy as policy_mod

    if args.list:
        return list_items()
    started, clock = datetime.datetime.now(), time.perf_counter()
    policy = policy_mod.load(args.policy)
    if args.strict:
        policy = dataclasses.replace(policy, warnings_fail=True, not_checked_fails=True)
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if args.pf_json == "-" and command:
        raise GpudoctorError("--json - cannot go with a command (its own output goes to stdout): give a file",
                             exitcodes.USAGE)
    outputs = {kind: _output(getattr(args, f"pf_{kind}"), args.force) for kind in ("json", "html", "junit")}
    ignore_items, ignore_checks = _split(args.ignore)
    resolved = _resolve(command) if command else None

    ctx = _context(args, policy)
    machine = audit.machine_items(ctx)
    job_run = None
    if resolved:
        job_run = _run_job(args, resolved, ignore_checks, ctx)
        machine = audit.rejudge(machine, ctx, ("PF301", "PF302"))  # with the links seen under load
    results, ignored = audit.apply_policy([*machine, *job.items(policy, job_run)], policy, ignore_items)
    report = audit.build_report(results, ctx, ignored=ignored, run=job_run, started=started,
                                duration_s=time.perf_counter() - clock)
    written = _write(report, outputs, args)
    if not args.quiet:
        _show(report, written)
    return int(report["exit_code"])


def _resolve(command: list[str]) -> tuple[list[str], str]:
    from gpudoctor.commands.diagnose import resolve_command

    return resolve_command(argparse.Namespace(module=None, target=["--", *command]))


def _context(args: argparse.Namespace, policy: Any) -> Any:
    from gpudoctor.preflight import gpu_facts
    from gpudoctor.preflight.context import Context, read_torch

    # NVML first: torch must not create anything on the GPUs before their processes are listed
    nvml = gpu_facts.read()
    return Context(nvml=nvml, torch=read_torch(), policy=policy, checkpoint_dir=Path(args.checkpoint_dir))


def _run_job(args: argparse.Namespace, resolved: tuple[list[str], str], ignore_checks: list[str], ctx: Any) -> Any:
    from gpudoctor.commands.diagnose import run_options
    from gpudoctor.pipeline import DiagnoseRequest, ReportOptions, diagnose_and_report
    from gpudoctor.preflight.job import JobRun
    from gpudoctor.preflight.link_watch import LinkWatcher
    from gpudoctor.run.status import say

    command, stem = resolved
    say(f"gpudoctor preflight: running the job under diagnose for at most {args.steps} steps or {args.duration:g} s")
    # the job's own reports: HTML and JSON where --out says, no summary (the checklist is the output)
    request = DiagnoseRequest(run=run_options(args, command), stem=stem,
                              report=ReportOptions(out=args.out, ignore=tuple(ignore_checks), force=args.force,
                                                   quiet=True))
    got: dict[str, Any] = {}
    watcher = LinkWatcher([g.index for g in ctx.visible]).start()
    try:
        code = diagnose_and_report(request, on_report=lambda report, files: got.update(report=report, files=files))
    finally:
        ctx.links_under_load = watcher.stop()
    if "report" not in got:
        raise GpudoctorError("the job's diagnosis produced no report", exitcodes.INTERNAL)
    return JobRun(report=got["report"], exit_code=code, files=got["files"])


def _write(report: dict[str, Any], outputs: dict[str, Path | None], args: argparse.Namespace) -> dict[str, str]:
    from gpudoctor.base.fsutil import write_atomic
    from gpudoctor.reports import preflight_html, preflight_junit

    renderers = {
        "json": lambda r: json.dumps(r, indent=1, allow_nan=False) + "\n",
        "html": preflight_html.render,
        "junit": preflight_junit.render,
    }
    written = {}
    for kind, path in outputs.items():
        if path is None:
            continue
        data = renderers[kind](report).encode("utf-8", "backslashreplace")
        try:
            write_atomic(path, data, exclusive=not args.force)
        except FileExistsError:
            raise GpudoctorError(
                f"{path} appeared meanwhile; nothing was overwritten", exitcodes.OUTPUT_EXISTS
            ) from None
        except OSError as exc:
            raise GpudoctorError(f"cannot write {path}: {exc.strerror or exc}", exitcodes.CANNOT_WRITE) from None
        written[kind] = str(path)
    if args.pf_json == "-":
        sys.stdout.write(renderers["json"](report))
        sys.stdout.flush()
    return written


def _show(report: dict[str, Any], written: dict[str, str]) -> None:
    from gpudoctor.reports import preflight_terminal
    from gpudoctor.reports.console import output_console

    try:
        console = output_console(sys.stderr, highlight=False)
        preflight_terminal.render(report, console, written=written)
    except (OSError, ValueError):
        pass  # stderr closed or full: the exit code and the files carry the result
