"""GD001 run-failed: the workload did not finish normally.

What it detects
    The command gpudoctor watched crashed with an uncaught exception, was killed by
    a signal (the kernel's OOM killer sends SIGKILL; a segfault is SIGSEGV), exited
    with a non-zero code (through sys.exit, or os._exit without Python's exit
    handlers), lost a DataLoader worker, stopped making progress before gpudoctor
    stopped it (a hang), or ignored gpudoctor's request to stop. An uncaught
    exception in a thread or a child process of a run that still succeeded is shown
    as a warning. Out-of-memory errors on the GPU are GD402's.

Why it matters
    Everything else in the report describes the part of the run that happened. A
    diagnosis of a run that died after 3 steps is a diagnosis of its start-up; fix
    the crash first, or read the other findings with that in mind.

How it is measured
    The supervisor keeps the workload's exit status (128+N when signal N killed
    it) and when it asked the workload to stop; the agent records uncaught
    exceptions (type, message, traceback, with secrets redacted) in every Python
    process, whether Python's exit handlers ran, and when the last step ended.
    A run that gpudoctor itself stopped (--duration, --steps, Ctrl-C, SIGTERM) is
    not a failure, whatever the stop signal became (torchrun raises its SignalException
    and exits 1; an exception raised after the stop was asked for is part of the stop);
    it is a hang when no step ended in the last {{HANG_MIN_S}} (and {{HANG_STEPS}} median
    steps) before the stop while the process tree sat idle. A tree that kept
    working meanwhile (its CPU, the median over that time, at least {{BUSY_PERCENT}})
    was in a phase without steps (a validation loop, a checkpoint): noted, not called
    a hang.

What to do
    Read the traceback in the report (or above, in the terminal: the workload's
    stderr is untouched). Exit 137 with no traceback usually means the host's OOM
    killer: look at host memory (fewer DataLoader workers, smaller prefetch_factor,
    no dataset copies per worker).
"""

from __future__ import annotations

import re
import signal
import statistics
from typing import TYPE_CHECKING

from gpudoctor.model import Evidence, Finding, Fix, Remedy, check
from gpudoctor.thresholds import CountThreshold, Threshold

if TYPE_CHECKING:
    from gpudoctor.session import ErrorEvent, Session

STOPPED_BY_REQUEST = {"duration", "steps", "interrupted", "terminated"}
HANG_MIN_S = Threshold(
    "no step for at least this long before the stop: a hang", 5.0, "s",
    "gpudoctor: longer than a checkpoint flush or a log line")
HANG_STEPS = CountThreshold(
    "... and at least this many median steps", 20, "steps",
    "gpudoctor: far outside step-to-step variation")

BUSY_PERCENT = Threshold(
    "process tree CPU while no step ended: busy in a phase without steps, not hung", 50.0, "% of a core",
    "gpudoctor: a deadlocked or waiting process uses next to no CPU")

_WORKER_DIED = re.compile(
    r"DataLoader worker \(pids?(?:\(s\))? ([\d, ]+)\) (is killed by signal: ([^.]+)|exited unexpectedly[^.]*)")
# torch's SIGCHLD handler names a worker's own exit status: "... exited unexpectedly with exit code 3"
_WORKER_EXIT_CODE = re.compile(r"exited unexpectedly with exit code (-?\d+)")
# a worker that dies while handing over a batch breaks the connection instead
_BROKEN_HANDOVER = ("ConnectionResetError", "ConnectionRefusedError", "BrokenPipeError", "EOFError")
# where a batch is handed between processes: the loop's side (torch/utils/data), torch's storage rebuild, and the
# resource sharer thread that passes a tensor's file descriptor (a surviving worker's end raises there too when
# its peer died; seen first in time under load, it read "The run crashed: ConnectionResetError")
_HANDOVER_CODE = ("torch/utils/data/", "torch/multiprocessing/reductions.py", "multiprocessing/resource_sharer.py")
_WORKER_RAISED = re.compile(r"^Caught (\w+) in DataLoader worker process (\d+)")
_EXCEPTION_LINE = re.compile(r"^[\w.]+(Error|Exception|Interrupt|Exit|Warning|Failure)\b.*")
_HOST_MEMORY = ("Check host memory (dmesg | grep -i oom): every DataLoader worker holds its own copy of what "
                "the Dataset keeps in Python objects; lower num_workers or prefetch_factor, or keep samples in "
                "numpy arrays / on disk.")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _first_line(text: str | None) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[0].strip()[:300] if lines else ""


@check("GD001", "run-failed", stage=0, title="The workload crashed, was killed, hung or exited non-zero",
       fix=Fix(untried="the run failed: fix what stopped it first, then try remedies"), run_failure=True)
def run(session: Session) -> list[Finding]:
    code = session.exit_code
    crashes = sorted((e for e in session.errors if e.kind == "exception"),
                     key=lambda e: e.t if e.t is not None else float("inf"))
    stopped = session.stop_reason in STOPPED_BY_REQUEST
    if stopped:  # what the stop turned into (an exception, exit code 1) is the stop, not a crash
        findings = [f for f in (_hang(session), _ignored_stop(session)) if f is not None]
        before = session.crashes_before_stop()
        if before and code not in (0, None, 130, 137, 143):
            findings.insert(0, _crash(session, before))
        return findings
    if code == 0 or code is None:
        return [_survived(session, crashes)] if crashes else []
    if crashes:
        return [_crash(session, crashes)]
    if any(e.kind == "oom" for e in session.errors):
        return []  # GD402 tells this story with the memory numbers
    if code > 128:
        return [_killed(session, code)]
    return [_exited(session, code)]


def _crash(session: Session, crashes: list[ErrorEvent]) -> Finding:
    first = crashes[0]
    code = session.exit_code
    evidence = {
        "exception": Evidence(first.type, label="exception type"),
        "pid": Evidence(first.pid, label="process"),
        "at_s": Evidence(round(first.t, 2) if first.t is not None else None, "s", label="time into the run"),
        "exit_code": Evidence(code, label="exit code"),
    }
    more = f" ({len(crashes)} uncaught exceptions in all, across processes/threads)" if len(crashes) > 1 else ""
    ending = f"; exit code {code}." if code is not None else "."
    died = _WORKER_DIED.search(first.message or "")
    trace = (first.traceback or "").replace("\\", "/")
    broken = not died and first.type in _BROKEN_HANDOVER and any(place in trace for place in _HANDOVER_CODE)
    if died or broken:
        return _worker_died(first, died, evidence, ending, more)
    raised = _WORKER_RAISED.match(first.message or "")
    if raised:
        cause = next((line.strip() for line in reversed((first.message or "").splitlines())
                      if _EXCEPTION_LINE.match(line.strip())), f"{raised.group(1)}")
        evidence["worker"] = Evidence(int(raised.group(2)), label="DataLoader worker id")
        return Finding(
            severity="critical",
            title=f"The run crashed: {raised.group(1)} in a DataLoader worker",
            message=f"DataLoader worker {raised.group(2)} raised {cause[:300]}; the training loop re-raised it"
                    f"{ending}{more}",
            evidence=evidence,
            remedy=Remedy("Fix the Dataset (__getitem__ / __iter__): the worker's own traceback is in the "
                          "message, under 'Original Traceback'."),
            ended_run=True,
        )
    return Finding(
        severity="critical",
        title=f"The run crashed: {first.type}",
        message=f"The workload raised {first.type}: {_first_line(first.message)}{more}{ending}",
        evidence=evidence,
        remedy=Remedy(_import_remedy(first) or "Fix the exception first; the traceback is in the report's "
                                               "evidence and in the workload's own stderr."),
        ended_run=code not in (0, None),
    )


_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
_FROM_TORCH = re.compile(r"cannot import name .* from 'torch[.']")
_REQUIREMENT = re.compile(r"Requirement '([\w.\-\[\], <>=!~]+)' not met")
# import names that are not the name pip installs them by
_PIP_NAMES = {"PIL": "pillow", "cv2": "opencv-python", "sklearn": "scikit-learn", "yaml": "PyYAML",
              "skimage": "scikit-image", "google.protobuf": "protobuf", "attr": "attrs"}


def _import_remedy(first: ErrorEvent) -> str | None:
    """A failed import: the module the interpreter lacks, by its name in the message (torchvision's
    'No module named ...' is not a missing torch; torch.distributed.tensor is an older torch)."""
    if first.type not in ("ModuleNotFoundError", "ImportError"):
        return None
    message = first.message or ""
    required = _REQUIREMENT.search(message)
    if required:  # lightning's requirement check names the package (and version) it wants
        return (f"The interpreter that ran the workload lacks {required.group(1)}: install it in that environment "
                f"(pip install '{required.group(1)}'), or run the workload with the Python of the environment "
                f"that has it.")
    missing = _MISSING_MODULE.search(message)
    module = missing.group(1) if missing else None
    if module in ("torch", "torch._C") or (module is None and _FROM_TORCH.search(message)):
        return ("The interpreter that ran the workload has no (working) torch: run it with the Python of the "
                "environment where torch is installed, or install torch there.")
    if module is None:
        return None
    package = module.split(".")[0]
    pip_name = _PIP_NAMES.get(package, _PIP_NAMES.get(".".join(module.split(".")[:2]), package))
    if module != package:  # a part of a package: missing from the version installed, or the package itself
        return (f"The interpreter that ran the workload cannot import {module}: install {pip_name} in that "
                f"environment, or upgrade it if it is there (a version without {module}).")
    return (f"The interpreter that ran the workload cannot import {module}: install {pip_name} in that "
            f"environment (or run the workload with the Python of the environment that has it); if {module} "
            f"is the project's own module, run from the folder that holds it or add that folder to PYTHONPATH.")


def _worker_died(first: ErrorEvent, died: re.Match[str] | None, evidence: dict[str, Evidence],
                 ending: str, more: str) -> Finding:
    """A DataLoader worker ended under the loop: by a signal, by its own exit, or unseen."""
    pids = [int(p) for p in re.findall(r"\d+", died.group(1))] if died else []
    signal_text = ((died.group(3) or "") if died else "").strip()
    exited = _WORKER_EXIT_CODE.search(first.message or "")
    code = int(exited.group(1)) if exited else None
    how = (f"killed by signal: {signal_text}" if signal_text else f"exited with code {code}" if code is not None
           else "exited unexpectedly" if died else f"its connection to the loop broke: {first.type}")
    evidence["worker_pids"] = Evidence(pids or None, label="worker process")
    evidence["worker_end"] = Evidence(how, label="how the worker ended")
    if code is not None:
        evidence["worker_exit_code"] = Evidence(code, label="the worker's exit code")
    killed = "kill" in signal_text.lower()
    segfault = "segmentation" in signal_text.lower()
    if code is not None:
        hint = (" The worker ended itself (sys.exit or os._exit in the Dataset, a transform or a library it "
                "calls): no signal, so not the out-of-memory killer.")
        remedy = ("Run the Dataset with num_workers=0: the exit then happens in the main process, where its "
                  "traceback (or the last line before it) shows which code exits.")
    elif segfault:
        hint = " A segfault points at a native extension used in the Dataset (decoder, augmentation)."
        remedy = ("Run the Dataset with num_workers=0 to get the native traceback, and update or replace the "
                  "extension that crashes.")
    else:
        hint = (" SIGKILL with no traceback is what the kernel's out-of-memory killer sends." if killed else
                " A worker that vanishes without a Python error was usually killed by the kernel's out-of-memory "
                "killer.")
        remedy = _HOST_MEMORY
    who = f"DataLoader worker {', '.join(map(str, pids))}" if pids else "A DataLoader worker"
    return Finding(
        severity="critical",
        title=f"A DataLoader worker died ({how})",
        message=f"{who} {how if died else f'died while handing over a batch ({first.type})'}, and the "
                f"training loop stopped with {first.type}{ending}{hint}{more}",
        evidence=evidence,
        remedy=Remedy(remedy),
        ended_run=True,
    )


def _survived(session: Session, crashes: list[ErrorEvent]) -> Finding:
    first = crashes[0]
    where = "a thread or a child process"
    roles = {p.pid: p.role for p in session.processes}
    if roles.get(first.pid) in ("child", "worker"):
        where = f"a {'DataLoader worker' if roles[first.pid] == 'worker' else 'child'} process (pid {first.pid})"
    elif roles.get(first.pid) == "main":
        where = f"a thread of process {first.pid}"
    return Finding(
        severity="warning",
        title=f"An uncaught {first.type} in {where.split(' (')[0]}; the run itself succeeded",
        message=f"{first.type}: {_first_line(first.message)} was raised and not caught in {where}, but the run "
                f"exited with code 0{' (' + str(len(crashes)) + ' such exceptions)' if len(crashes) > 1 else ''}. "
                "Work that part was doing may be missing.",
        evidence={"exception": Evidence(first.type, label="exception type"),
                  "pid": Evidence(first.pid, label="process"),
                  "count": Evidence(len(crashes), label="uncaught exceptions")},
        remedy=Remedy("Check that the thread or subprocess was meant to fail; its traceback is in the report's "
                      "evidence."),
    )


def _killed(session: Session, code: int) -> Finding:
    name = _signal_name(code - 128)
    hint = " SIGKILL with no traceback is what the kernel's out-of-memory killer sends." if code == 137 else ""
    if code == 139:
        hint = " A segmentation fault happens in native code (a C/C++/CUDA extension), not in Python."
    return Finding(
        severity="critical",
        title=f"The run was killed by {name}",
        message=f"The workload ended by {name} (exit code {code}) after {session.duration_s:.1f}s.{hint}",
        evidence={"exit_code": Evidence(code, label="exit code"), "signal": Evidence(name)},
        remedy=Remedy(_HOST_MEMORY if code == 137 else
                      "Run it again with PYTHONFAULTHANDLER=1 to see the Python stack at the crash; update or "
                      "replace the native extension that crashes." if code in (134, 135, 139) else
                      "Find out who sent the signal (scheduler time limit, OOM killer, a user)."),
        ended_run=True,
    )


def _exited(session: Session, code: int) -> Finding:
    mains = [p for p in session.processes if p.role == "main"]
    no_handlers = bool(mains) and all(p.exit_handlers_ran is False for p in mains)
    how = ("without running Python's exit handlers (os._exit(), or a native exit()): buffered output and "
           "atexit work of the workload were lost" if no_handlers else
           "without an uncaught exception (sys.exit, or a launcher passing on a child's status)")
    return Finding(
        severity="warning",
        title=f"The run exited with code {code}" + (" through os._exit" if no_handlers else ""),
        message=f"The workload exited with code {code} after {session.duration_s:.1f}s {how}.",
        evidence={"exit_code": Evidence(code, label="exit code"),
                  "exit_handlers": Evidence(not no_handlers if mains else None, label="Python exit handlers ran")},
    )


def _hang(session: Session) -> Finding | None:
    """No step ended for a long while before gpudoctor stopped the run."""
    stop = session.stop_requested_s
    steps = session.steps
    last = steps.last_step_t if steps.last_step_t is not None else (steps.records[-1].t if steps.records else None)
    if stop is None or last is None or session.stop_reason == "steps" or len(steps.records) < 3:
        return None
    median = statistics.median(r.duration_s for r in steps.records)
    stall = stop - last
    if stall < max(HANG_MIN_S, HANG_STEPS * median):
        return None
    busy = _tree_cpu_between(session, last, stop)
    if busy is not None and busy >= BUSY_PERCENT:
        return _phase_without_steps(session, stall, busy)
    return Finding(
        severity="warning",
        title=f"The run stopped making progress: no step in the last {stall:.0f}s",
        message=f"No step ended in the last {stall:.1f}s before gpudoctor stopped the run ({session.stop_reason}), "
                f"after {steps.count} steps of {median * 1000:.1f} ms (median). The run hung (a deadlock, a "
                "DataLoader or collective waiting forever) or paused for long (evaluation, checkpointing).",
        evidence={"stall_s": Evidence(round(stall, 1), "s", label="time since the last step"),
                  "last_step_s": Evidence(round(last, 2), "s", label="last step ended at"),
                  "step_median_s": Evidence(round(median, 4), "s", label="step time (median)")},
        remedy=Remedy("Find where it waits: py-spy dump --pid PID (every thread's Python stack), or "
                      "faulthandler.dump_traceback_later(600) in the script; for DataLoader hangs set a timeout=."),
    )


def _tree_cpu_between(session: Session, start: float, end: float) -> float | None:
    """Median CPU of the workload's process tree (% of one core) over (start, end]; None
    with fewer than two samples there."""
    samples = [s.tree_percent for s in session.cpu_samples if start < s.t <= end]
    return statistics.median(samples) if len(samples) >= 2 else None


def _phase_without_steps(session: Session, quiet_s: float, busy: float) -> Finding:
    return Finding(
        severity="info",
        title=f"No step in the last {quiet_s:.0f}s, but the process kept working",
        message=f"No {session.steps.source or ''} step ended in the last {quiet_s:.1f}s before gpudoctor stopped the "
                f"run ({session.stop_reason}), while its processes used {busy:.0f}% of a core (median): a phase "
                "without steps, such as a validation loop or a checkpoint, not a hang. The step statistics cover "
                "the stepping phases only.",
        evidence={"quiet_s": Evidence(round(quiet_s, 1), "s", label="time since the last step"),
                  "tree_cpu_percent": Evidence(round(busy, 1), "%", label="process tree CPU meanwhile (median)")},
    )


def _ignored_stop(session: Session) -> Finding | None:
    """gpudoctor asked with SIGINT; the workload ended only by SIGTERM or SIGKILL."""
    code = session.exit_code
    if code not in (137, 143) or (session.stop_reason == "terminated" and code == 143):
        return None
    name = _signal_name(code - 128)
    return Finding(
        severity="info",
        title=f"The workload ignored the request to stop and was ended by {name}",
        message=f"gpudoctor asked the workload to stop ({session.stop_reason}) and it did not, so it was ended by "
                f"{name} (exit code {code}). Its exit handlers did not run: its own clean-up (checkpoint, logs) and "
                "the last events may be missing.",
        evidence={"exit_code": Evidence(code, label="exit code"), "signal": Evidence(name)},
        remedy=Remedy("Let the training loop end on KeyboardInterrupt (SIGINT): save, then exit."),
    )
