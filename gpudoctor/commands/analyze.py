"""`gpudoctor analyze TRACE`: diagnose from an existing torch.profiler trace, without a run.

    gpudoctor analyze trace.json.gz                 (HTML + JSON + session in ./gpudoctor-reports/)
    gpudoctor analyze trace.json --json -           (only the JSON report, on stdout)
    gpudoctor analyze trace.json --format markdown  (one format, on stdout)
    gpudoctor analyze trace.json --out reports/ --json ci/report.json

TRACE is what `prof.export_chrome_trace(path)` writes (JSON, or gzip-compressed), or
a directory of traces, one per rank, as `torch.profiler.tensorboard_trace_handler(dir)`
writes them (*.pt.trace.json[.gz]): they are analysed in parallel, one per core, and
the report shows each; the checks judge the first (rank 0).
Record it with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and
with_stack=True so synchronisations can be traced to your code. The loop's data wait
comes from the DataLoader ``__next__`` ranges the profiler records, per ``ProfilerStep#N``
(or per batch, without them; gpudoctor.collectors.trace_loader). A trace holds no CPU or
NVML samples and does not say how many workers or usable cores there were: the checks
that need them report themselves skipped, and the data checks say what they could not know.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoctor import __version__
from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError
from gpudoctor.commands.argtypes import non_negative_int
from gpudoctor.reports.formats import DEFAULT_FILE_FORMATS, choices
from gpudoctor.reports.formats import file_formats as file_formats_of
from gpudoctor.session import (
    Environment,
    GpuInfo,
    LoaderInfo,
    ProcessInfo,
    ProfileSummary,
    Session,
    StepRecord,
    Steps,
)

if TYPE_CHECKING:
    from gpudoctor.collectors.trace_loader import TraceLoaderSteps
    from gpudoctor.run.analyze_helper import Helper

# what one trace file gives: its statistics, its metadata, the pids that ran operators, its loader steps
Summarized = tuple[ProfileSummary, dict[str, Any], list[int], "TraceLoaderSteps | None"]

log = logging.getLogger(__name__)

DEFLATE_MAX_RATIO = 1032  # deflate inflates a byte to at most this many
LONG_TRACE_BYTES = 32 << 20  # decoding takes over a tenth of a second: the HTML renderer starts beside
RANK_TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")  # torch.profiler.tensorboard_trace_handler's names
# what a profiler trace cannot tell; the checks needing these facts are skipped with this reason
NOT_IN_TRACE = {
    "steps": "a profiler trace holds no per-step timings (use `gpudoctor diagnose`)",
    "cpu": "a profiler trace holds no CPU utilization samples (use `gpudoctor diagnose`)",
    "storage": "a profiler trace does not say where the data lives (use `gpudoctor diagnose --data PATH`)",
    "gpu": "a profiler trace holds no NVML samples (use `gpudoctor diagnose`)",
    "gpm": "a profiler trace holds no GPM metrics (use `gpudoctor diagnose`)",
    "allocator": "a profiler trace holds no CUDA allocator statistics (use `gpudoctor diagnose`)",
}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "analyze",
        help="diagnose from an existing torch.profiler trace (no run needed)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trace", metavar="TRACE",
                   help="Chrome trace from torch.profiler (.json or .json.gz), or a directory of them (one per rank)")
    p.add_argument("--steps", type=non_negative_int, default=0, metavar="N",
                   help="training steps the trace covers (default: its ProfilerStep#N ranges, if any)")
    p.add_argument("--out", metavar="PATH",
                   help="report directory or file stem (default gpudoctor-reports/<trace>-<time>)")
    p.add_argument("--json", dest="json_path", metavar="PATH",
                   help="also write the JSON report here; '-' prints it on stdout and writes no other file "
                   "unless --out is given")
    p.add_argument("--format", dest="formats", action="append", choices=choices(), metavar="FMT",
                   help=f"{'|'.join(choices())} (repeatable); without --out a single format goes to stdout")
    p.add_argument("--ignore", action="append", default=[], metavar="ID",
                   help="silence a check (GD301 or its slug); repeat or comma-separate")
    p.add_argument("--fail-on", choices=("warning", "critical"),
                   help=f"exit {exitcodes.FAIL_ON} when a finding reaches this severity")
    p.add_argument("--force", action="store_true", help="overwrite existing report files")
    p.add_argument("--quiet", action="store_true", help="no terminal summary on stderr")
    p.set_defaults(func=run)




def session_from_trace(path: str | Path, steps: int = 0, *, meanwhile: Callable[[ProfileSummary], None] | None = None,
                       helper: Helper | None = None) -> Session:
    """A Session (source="analyze") holding the trace's ProfileSummary and what its metadata says.

    `path` may be a directory of traces, one per rank (torch.profiler.tensorboard_trace_handler
    writes ``*.pt.trace.json[.gz]``): see session_from_trace_dir.
    Raises GpudoctorError (NOT_FOUND or BAD_DATA) for input that is not a readable trace.
    `meanwhile` is called with the statistics once they are done, while the replay may still run beside.
    A long trace's replay runs in `helper` (gpudoctor.run.analyze_helper), or in one started here.
    """
    path = Path(path)
    if path.is_dir() and rank_traces(path):
        return session_from_trace_dir(path, steps)
    own = helper is None and _long_trace(path)
    if own:
        from gpudoctor.run.analyze_helper import Helper

        helper = Helper.start(trace=path)
    try:
        profile, meta, pids, loader = _summarize_file(path, steps, helper=helper, meanwhile=meanwhile)
    finally:
        if own and helper is not None:
            helper.close()
    session = _session(profile, meta, pids, loader)
    session.notes.append(f"built by `gpudoctor analyze` from the profiler trace {path.name}")
    return session


def rank_traces(directory: Path) -> list[Path]:
    """The traces of a tensorboard_trace_handler directory, by name (one per rank or worker)."""
    return sorted(p for p in directory.iterdir() if p.name.endswith(RANK_TRACE_SUFFIXES) and p.is_file())


def session_from_trace_dir(directory: Path, steps: int = 0) -> Session:
    """One Session for a directory of traces, analysed in parallel (a process per usable core):
    the first trace (by name: rank 0 with the handler's names) is the primary window the
    checks judge; every trace is a window of its own in `profiles`, named after its file."""
    paths = rank_traces(directory)
    from gpudoctor.run.forking import usable_cores

    workers = min(len(paths), usable_cores())
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_summarize_file_quietly, paths, [steps] * len(paths)))
    else:
        results = [_summarize_file_quietly(p, steps) for p in paths]
    failed = [(path, result) for path, result in zip(paths, results) if isinstance(result, str)]
    if len(failed) == len(paths):  # nothing to report on: the first file's error
        code, message = failed[0][1].split(" ", 1)
        raise GpudoctorError(message, int(code))
    skipped = [_skipped_note(path, result) for path, result in failed]
    for note in skipped:  # one bad rank file costs its own window, not the directory's report
        print(f"gpudoctor: warning: {note}", file=sys.stderr)
    paths = [path for path, result in zip(paths, results) if not isinstance(result, str)]
    summaries = [r for r in results if not isinstance(r, str)]
    for n, ((profile, _, _, _), path) in enumerate(zip(summaries, paths), start=1):
        profile.label, profile.index, profile.phase = "rank", n, path.name
    profile, meta, _, loader = summaries[0]
    pids = sorted({pid for _, _, file_pids, _ in summaries for pid in file_pids})
    session = _session(profile, meta, pids, loader)
    session.profiles = [s[0] for s in summaries]
    session.duration_s = max(s[0].window_s for s in summaries)
    session.notes.append(f"built by `gpudoctor analyze` from {len(paths)} profiler traces in {directory.name}/ "
                         f"({', '.join(p.name for p in paths[:8])}{', ...' if len(paths) > 8 else ''}); "
                         f"the checks judge {paths[0].name}, every trace is shown")
    session.notes.extend(skipped)
    return session


def _skipped_note(path: Path, error: str) -> str:
    """The note for a rank file that could not be analysed ("CODE message" from its worker)."""
    message = error.split(" ", 1)[1]
    prefix = f"{path}: "
    return f"{path.name} skipped: {message[len(prefix):] if message.startswith(prefix) else message}"


def _summarize_file_quietly(path: Path, steps: int) -> Summarized | str:
    """_summarize_file for a worker process: an error comes back as "CODE message", not raised."""
    try:
        return _summarize_file(path, steps)
    except GpudoctorError as exc:
        return f"{exc.code} {exc}"


def _summarize_file(path: Path, steps: int, *, helper: Helper | None = None,
                    meanwhile: Callable[[ProfileSummary], None] | None = None) -> Summarized:
    """(ProfileSummary with its replay, the trace's metadata, the pids that ran operators, the
    loop's steps with their data wait).

    `helper`: a long trace's replay runs there beside the statistics (replay.background);
    directories are analysed a process per trace instead."""
    from gpudoctor.collectors.trace import summarize_trace
    from gpudoctor.collectors.trace_decode import gc_paused, read_trace
    from gpudoctor.collectors.trace_file import TraceError
    from gpudoctor.collectors.trace_loader import loader_steps
    from gpudoctor.replay import background
    from gpudoctor.replay.window import profiler_steps

    try:
        with gc_paused():
            data = read_trace(path, rest=helper.rest if helper is not None and helper.decoding else None)
            replay = background.start(data, steps if steps > 0 else profiler_steps(data), helper)
            profile = summarize_trace(data, steps=steps)
            meta, pids, loader = data.meta, _process_ids(data), loader_steps(data)
            if meanwhile is not None:
                meanwhile(profile)
            del data  # freeing a million events takes a while: better while the replay runs in the helper
            profile.replay = replay()
    except TraceError as exc:
        message = str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
        raise GpudoctorError(message, exitcodes.NOT_FOUND if exc.not_found else exitcodes.BAD_DATA) from None
    except MemoryError:
        raise GpudoctorError(f"{path}: too large to load in memory; profile fewer steps", exitcodes.BAD_DATA) from None
    return profile, meta, pids, loader


def _session(profile: ProfileSummary, meta: dict[str, Any], pids: list[int],
             loader: TraceLoaderSteps | None = None) -> Session:
    session = Session(
        tool_version=__version__,
        command=[],
        duration_s=profile.window_s,
        source="analyze",
        environment=_environment(meta),
        processes=[ProcessInfo(pid=pid) for pid in pids],
        profile=profile,
    )
    session.steps.count = profile.steps
    session.unavailable.update(NOT_IN_TRACE)
    if profile.kernel_count == 0 and profile.gpu_busy_us <= 0:
        session.unavailable["gpu"] = profile.error or "the trace holds no GPU activity"
    if loader is not None:
        _apply_loader_steps(session, loader, pids[0] if pids else 0)
    else:
        session.unavailable["loader"] = ("the profiler trace holds no DataLoader batches (no "
                                         "`enumerate(DataLoader)#...__next__` ranges in at least 3 steps)")
    return session


def _apply_loader_steps(session: Session, found: TraceLoaderSteps, pid: int) -> None:
    """The trace's steps and DataLoader, as the agent would have recorded them, with what
    a trace cannot know left out (the worker count, their per-batch cost, the cores)."""
    t, records = 0.0, []
    for duration, wait in zip(found.durations_s, found.waits_s):
        t += duration
        records.append(StepRecord(t=t, duration_s=duration, data_wait_s=wait))
    # ProfilerStep ranges are the user's own marks (prof.step()); without them, one step per batch
    source = "explicit" if found.source == "profiler steps" else "loader"
    session.steps = Steps(source=source, count=len(records), records=records, last_step_t=t)
    loader = LoaderInfo(loader_id="trace:0", pid=pid, num_workers=0 if found.single_process else 1,
                        batches=found.batches, wait_total_s=sum(found.waits_s), wait_max_s=found.wait_max_s)
    if found.single_process:  # the batch is made inside __next__: its cost is measured there
        loader.fetch_batches, loader.fetch_wall_s, loader.fetch_cpu_s = (found.batches, found.batch_wall_s,
                                                                        found.batch_ops_s)
    session.loaders = [loader]
    for fact in ("loader", "steps"):
        session.unavailable.pop(fact, None)
    session.notes.append(
        f"steps and data wait from the trace: {len(records)} {found.source}, {found.batches} DataLoader batches"
        + (" made in the main process (num_workers=0); their CPU time is the operators' inside __next__, a lower "
           "bound" if found.single_process else
           " from worker processes (_MultiProcessingDataLoaderIter): how many, and what a batch cost them, a trace "
           "does not record (counted as 1 worker)")
        + "; the usable cores are not in a trace")


def _environment(meta: dict[str, Any]) -> Environment:
    env = Environment()
    if isinstance(meta.get("host_name"), str):
        env.hostname = meta["host_name"]
    version = meta.get("cuda_runtime_version")
    if isinstance(version, int) and version > 0:  # CUDA encodes 12.4 as 12040
        env.cuda = f"{version // 1000}.{version % 1000 // 10}"
    for n, props in enumerate(meta.get("deviceProperties") or []):
        if isinstance(props, dict) and isinstance(props.get("name"), str):
            index = props.get("id", n)
            memory = props.get("totalGlobalMem")
            env.gpus.append(GpuInfo(index=index if isinstance(index, int) else n, uuid="", name=props["name"],
                                    memory_total_bytes=memory if isinstance(memory, int) else None))
    return env


def _process_ids(index: Any) -> list[int]:
    """The processes that ran operators (cpu_op events)."""
    import numpy as np

    from gpudoctor.collectors.intervals import distinct

    ops = index.ops
    operator_codes = [code for code, value in enumerate(index.tables["cat"].distinct) if value == "cpu_op"]
    pids = set(index.tables["pid"].decode(distinct(ops.pid[np.isin(ops.cat, operator_codes)])))
    return sorted(p for p in pids if isinstance(p, int) and not isinstance(p, bool))


def trace_stem(path: Path) -> str:
    name = path.name
    for suffix in (".json.gz", ".gz", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _prepare(formats: list[str], done: tuple[str, ...], profile: ProfileSummary | None = None) -> None:
    """Import what judging and the report need (matplotlib for the HTML's charts above all;
    not the formats in `done`, made ready elsewhere) while a long trace's replay finishes in
    its own process: that time is otherwise waited. The HTML's template is compiled then, and
    its kernel chart drawn from the `profile`'s statistics (the report's, once judged)."""
    import gpudoctor.verdict.build
    import gpudoctor.verdict.engine  # noqa: F401
    from gpudoctor.reports import renderer
    from gpudoctor.verdict.registry import load_checks

    load_checks()
    for fmt in formats:
        if fmt not in done:
            renderer(fmt)
    if "html" in formats and "html" not in done:
        from gpudoctor.reports import html

        html.prepare(profile.kernel_duration_hist if profile is not None else None)


def _long_trace(path: Path) -> bool:
    """A trace whose decode outlasts the HTML renderer's imports (and no fixture of the tests):
    LONG_TRACE_BYTES or more of JSON; a gzip file's by the size its trailer records (the
    uncompressed size modulo 4 GiB: over the size limit, the decode refuses it anyway), when
    deflate could reach it (at most DEFLATE_MAX_RATIO times the file: a truncated file's last
    bytes are no trailer)."""
    try:
        if not path.is_file():
            return False
        size = path.stat().st_size
        if size >= LONG_TRACE_BYTES:
            return True
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b" or size < 20:
                return False
            fh.seek(-4, os.SEEK_END)
            inflated = int.from_bytes(fh.read(4), "little")
            return LONG_TRACE_BYTES <= inflated <= size * DEFLATE_MAX_RATIO
    except OSError:
        return False


def run(args: argparse.Namespace) -> int:
    from gpudoctor.run.analyze_helper import Helper  # the rest once the helper is forked: it imports what it needs

    path = Path(args.trace)
    formats = list(dict.fromkeys(args.formats or []))
    to_stdout = args.json_path == "-"
    if to_stdout and not args.out and any(f != "json" for f in file_formats_of(formats)):
        # stdout already carries the JSON: another file format would be silently dropped
        other = next(f for f in file_formats_of(formats) if f != "json")
        raise GpudoctorError(f"--json - prints the JSON report on stdout; --format {other} needs --out",
                             exitcodes.USAGE)
    to_files = bool(args.out) or not (to_stdout or (len(formats) == 1 and not args.json_path))
    file_formats = file_formats_of(formats) or list(DEFAULT_FILE_FORMATS)
    html = "html" in file_formats if to_files else formats == ["html"]
    # a long trace: a helper process replays it and renders the HTML (imported while the trace is decoded)
    helper = Helper.start(("html",) if html else (), args.fail_on, trace=path) if _long_trace(path) \
        else Helper((), args.fail_on)
    with helper:
        # the trace first: what judging and writing need is imported once the decode is done
        session = session_from_trace(path, steps=args.steps, helper=helper,
                                     meanwhile=lambda profile: _prepare(file_formats, helper.formats, profile))
        from gpudoctor.commands.argtypes import split_ids
        from gpudoctor.reports import render, show
        from gpudoctor.verdict.judge import JudgeOptions, WritePlan, judge, write
        from gpudoctor.verdict.output import plan_outputs

        report = judge(session, JudgeOptions(ignore=tuple(split_ids(args.ignore)))).report
        if to_stdout:
            text = render(report, "json")
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        if not to_files:
            if not to_stdout:  # one format asked for, no --out: it is the output (pipe it, redirect it)
                show(report, formats[0], sys.stdout, text=helper.render)
            elif not args.quiet:
                from gpudoctor.reports import terminal

                terminal.show_summary(report, sys.stderr)
        else:
            paths = plan_outputs(args.out, trace_stem(path), datetime.now(), file_formats, force=args.force,
                                 json_path=None if to_stdout else args.json_path, trace=False)
            written = write(report, WritePlan(paths, session=session, fail_on=args.fail_on, render=helper.render,
                                                     render_ahead=helper.render_ahead))
            report = written.report
            if not args.quiet:  # the human summary: stderr, so stdout stays clean for scripts
                from gpudoctor.reports import terminal

                terminal.show_summary(report, sys.stderr, written={k: str(p) for k, p in written.files.items()})
    from gpudoctor.model import severity_rank

    threshold = severity_rank(args.fail_on) if args.fail_on else None
    if threshold is not None and any(severity_rank(f["severity"]) >= threshold for f in report["findings"]):
        return exitcodes.FAIL_ON
    return exitcodes.OK
