"""Where producing a batch spends its time: cProfile over a few batches in one process.

Decided in the training process, done where batches are made. The agent's thread
of the main process watches each DataLoader's wait: once the loop has waited for
data at least 5% of the time over a second, after the first `WARMUP_BATCHES`
batches, it writes a request file into the session directory. The first process
that fetches a batch after that (a worker, or the main process itself with
num_workers=0) claims the request with an exclusive file create, so exactly one
process profiles, and runs cProfile around its next `fetch_profile_batches`
fetches (``__getitem__``, the transforms and the collate, on the fetching thread
only). Then it emits one ``fetch_profile`` event with the functions that cost the
most and stops for good: the overhead is those few batches in one process. The event
says when the profiled fetches ran (``t_start``, ``t_end``, wall clock): cProfile slows
Python-heavy batch production by a fifth or more, and with ``num_workers=0`` those
fetches are in series with the steps, so the steps of that span are left out of the
step statistics like a profiler window's. A process that ends (or a worker that is shut
down) before the last profiled batch emits what it has, ``complete`` false.

A function's own time is its Python time plus the builtins it called directly (a
transform's ``torch.*`` calls count towards the transform). Nothing is profiled while
another profiler runs in the process (the workload's, a torch.profiler window, or a step
counted before one: they use the same interpreter hook).
"""

from __future__ import annotations

import os
import sys
import time
import types

TYPE_CHECKING = False
if TYPE_CHECKING:
    import cProfile
    from _lsprof import profiler_entry
    from collections.abc import Iterable

    from .protocol import FunctionRow
    from .torch_hooks import TorchHooks

WARMUP_BATCHES = 5  # the first batches include starting the workers
WAIT_SHARE = 0.05  # the TensorBoard profiler plugin's "input-bound" line
CHECK_EVERY_S = 0.5  # how often a fetching process looks for the request file
TOP = 12
AGENT_FILES = ("_gpudoctor_agent", "gpudoctor/agent/", "cProfile.py")


class FetchProfiler:
    IDLE, RUNNING, DONE = "idle", "running", "done"

    def __init__(self, hooks: TorchHooks) -> None:
        self.hooks = hooks
        config = hooks.agent.config
        self.batches_wanted = int(config.get("fetch_profile_batches", 8))
        directory = hooks.agent.directory
        self.request_path = os.path.join(directory, "fetch-profile.request")
        self.claim_path = os.path.join(directory, "fetch-profile.claim")
        self.state = self.IDLE
        self.pid = os.getpid()
        self.next_check = 0.0
        self.prof: cProfile.Profile | None = None
        self.batches = 0
        self.wall = 0.0
        self.first: float | None = None  # wall clock at the first profiled fetch's start
        self.last: float | None = None  # ... and at the last one's end
        self.requested = False
        self.seen: dict[str | None, tuple[float, float, float]] = {}  # loader id -> (batches, wait, time) last looked

    # -- the main process decides (agent's thread) --------------------------------
    def poll(self) -> None:
        if self.requested:
            return
        hooks = self.hooks
        with hooks.loader_lock:
            stats = {k: (v[0], v[1]) for k, v in hooks.loader_stats.items()}
        now = time.monotonic()
        for loader_id, (batches, wait) in stats.items():
            previous = self.seen.get(loader_id)
            if previous is None or batches < WARMUP_BATCHES:
                self.seen[loader_id] = (batches, wait, now)
                continue
            if now - previous[2] < 1.0:
                continue
            self.seen[loader_id] = (batches, wait, now)
            # a None id (an iterator the agent could not adopt) names no loader to profile
            if previous[0] >= WARMUP_BATCHES and batches > previous[0] and loader_id is not None and \
                    (wait - previous[1]) / (now - previous[2]) >= WAIT_SHARE:
                self._request(loader_id)
                return

    def _request(self, loader_id: str) -> None:
        self.requested = True
        try:
            fd = os.open(self.request_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, loader_id.encode())
            os.close(fd)
            self.hooks.agent.emit("fetch_profile_request", loader=loader_id)
        except OSError:
            pass

    # -- a fetching process profiles (its fetching thread) --------------------------
    def begin(self) -> bool:
        """Before a fetch: True when this fetch is to be profiled (cProfile enabled)."""
        try:
            if self.state == self.DONE:
                return False
            # the time gate first: a getpid is a system call, and this runs before every batch
            if self.state == self.IDLE and time.monotonic() < self.next_check:
                return False
            if self.pid != os.getpid():  # forked: the parent's progress is not ours
                type(self).__init__(self, self.hooks)
            if self.state == self.IDLE and not self._claim():
                return False
            if sys.getprofile() is not None or self.hooks.torch.autograd._profiler_enabled():
                return False  # another profiler has the hook now (a step counted too): try the next batch
            assert self.prof is not None  # set by _claim() with RUNNING
            if self.first is None:
                self.first = time.time()
            self.prof.enable()
            return True
        except Exception as exc:  # noqa: BLE001 (the fetch profile is given up and reported)
            self.state = self.DONE
            self.hooks.agent.error("fetch_profile", exc)
            return False

    def _claim(self) -> bool:
        now = time.monotonic()
        if now < self.next_check:
            return False
        self.next_check = now + CHECK_EVERY_S
        if not os.path.exists(self.request_path):
            return False
        try:
            os.close(os.open(self.claim_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError:
            self.state = self.DONE  # another process profiles (or the directory is gone)
            return False
        import cProfile

        self.prof = cProfile.Profile()
        self.state = self.RUNNING
        return True

    def end(self, wall: float) -> None:
        """After a profiled fetch (it may have raised)."""
        try:
            assert self.prof is not None  # begin() returned True: a profile runs
            self.prof.disable()
            self.last = time.time()
            self.batches += 1
            self.wall += wall
            if self.batches >= self.batches_wanted:
                self.state = self.DONE
                prof, self.prof = self.prof, None
                self._emit(prof, complete=True)
        except Exception as exc:  # noqa: BLE001 (the fetch profile is given up and reported)
            self.state = self.DONE
            self.hooks.agent.error("fetch_profile", exc)

    def finish(self) -> None:
        """The process ends: a profile cut short by the run's end emits the batches it has."""
        if self.state != self.RUNNING or self.pid != os.getpid():
            return
        prof, self.prof = self.prof, None
        self.state = self.DONE
        if prof is None or not self.batches:
            return
        try:
            self._emit(prof, complete=False)
        except Exception as exc:  # noqa: BLE001 (exit goes on; reported)
            self.hooks.agent.error("fetch_profile", exc)

    def _emit(self, prof: cProfile.Profile, complete: bool) -> None:
        functions = top_functions(prof.getstats(), os.getcwd())
        info = None
        try:
            info = self.hooks.torch.utils.data.get_worker_info()
        except Exception:  # noqa: BLE001 (no worker info: the profile says less)
            pass
        agent = self.hooks.agent
        agent.emit("fetch_profile", batches=self.batches, wall_s=round(self.wall, 6), functions=functions,
                   loader=getattr(self.hooks.tls, "loader", None), worker=info.id if info is not None else None,
                   t_start=self.first, t_end=self.last, complete=complete)
        agent.writer.flush()


def top_functions(stats: Iterable[profiler_entry], cwd: str, top: int = TOP) -> list[FunctionRow]:
    """[[name, file, line, own_s, cumulative_s, calls, caller], ...] by own time, from cProfile's getstats()."""
    callers: dict[types.CodeType, tuple[types.CodeType, float]] = {}  # code -> (caller code, its time from there)
    rows: list[tuple[float, float, int, types.CodeType]] = []
    for entry in stats:
        code = entry.code
        if isinstance(code, str):
            continue  # a builtin: its time counts in its caller's own time
        own = entry.inlinetime
        for sub in entry.calls or ():
            if isinstance(sub.code, str):
                own += sub.totaltime
            else:
                best = callers.get(sub.code)
                if best is None or sub.totaltime > best[1]:
                    callers[sub.code] = (code, sub.totaltime)
        if not any(marker in code.co_filename.replace("\\", "/") for marker in AGENT_FILES):
            rows.append((own, entry.totaltime, entry.callcount, code))
    rows.sort(key=lambda r: -r[0])
    out: list[FunctionRow] = []
    for own, total, calls, code in rows[:top]:
        caller = callers.get(code)
        caller_text = None
        if caller is not None:
            c = caller[0]
            caller_text = "%s (%s:%d)" % (_name(c), short_path(c.co_filename, cwd), c.co_firstlineno)
        out.append([_name(code), short_path(code.co_filename, cwd), code.co_firstlineno, round(own, 6),
                    round(total, 6), int(calls), caller_text])
    return out


def _name(code: types.CodeType) -> str:
    return getattr(code, "co_qualname", None) or code.co_name


def short_path(path: str, cwd: str) -> str:
    """A path as a reader knows it: inside the package for installed code, relative to the cwd."""
    norm = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in norm:
            return norm.split(marker, 1)[1]
    base = cwd.replace("\\", "/").rstrip("/") + "/"
    if norm.startswith(base):
        return norm[len(base):]
    lib = norm.find("/lib/python3")
    if lib >= 0:
        rest = norm[lib + len("/lib/"):]
        return rest.split("/", 1)[1] if "/" in rest else rest
    parts = norm.rsplit("/", 2)
    return "/".join(parts[-2:])
