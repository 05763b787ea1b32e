"""Batch sizes one after another in one trial process (the child's side of process reuse).

    python -m gpudoctor.sweep.worker --commands FD --replies FD

One JSON object a line on each pipe. Once torch is imported the worker says
{"ready": true}; then, for each {"spec": PATH, "result": PATH} it reads, it runs the
trial (gpudoctor.sweep.trial.run_trial), writes the TrialResult JSON to PATH, puts the
process back into the state a fresh one would measure from, and answers
{"reusable": BOOL, "why": TEXT, "leftover_bytes": N}. The end of the commands pipe ends
the worker. stdin is not used: it belongs to the user's code, as stdout and stderr do.

Between sizes: a garbage collection; on GPU the caching allocator's cache and cuBLAS's
workspaces are released and the peak and accumulated statistics reset, so the next
size's peak_reserved_bytes, peak_allocated_bytes and alloc_retries are its own; on CPU
freed heap goes back to the system (malloc_trim) and the peak RSS is reset. On CPU the
peak RSS is the process's, so it also holds what earlier sizes left resident (oneDNN
keeps its primitives per shape: about 2 MB a size for a small CNN); past
LEFTOVER_LIMIT_BYTES more than after the process's first size, it is not reused. A
process that cannot be brought back (a sticky CUDA error, memory still held by the last
size, a peak RSS that cannot be reset) says it is not reusable, and the parent ends it.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any, BinaryIO

from gpudoctor.base.fsutil import write_atomic
from gpudoctor.metrics import format_bytes
from gpudoctor.sweep import records
from gpudoctor.sweep.records import TrialResult, TrialSpec
from gpudoctor.sweep.trial import one_line, peak_rss_bytes, reset_peak_rss, run_trial

# Memory the last size may leave allocated (a user's module-level cache, a workspace
# torch keeps): above it the next size's peak would carry it, so the process is not reused.
LEFTOVER_LIMIT_BYTES = 64 * 2**20


def _import_torch() -> Any:
    try:
        return importlib.import_module("torch")
    except Exception:  # noqa: BLE001  (run_trial reports it as the trial's load error)
        return None


def _release_host_memory() -> None:
    """Hand freed heap back to the system (glibc), so the next size's RSS starts low."""
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def _clean_cuda(torch: Any, device: Any, batch_size: int) -> tuple[bool, str | None, int | None]:
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_workspaces is not None:
        clear_workspaces()
        torch.cuda.empty_cache()
    leftover = int(torch.cuda.memory_allocated(device))
    torch.cuda.reset_peak_memory_stats(device)
    torch.cuda.reset_accumulated_memory_stats(device)  # num_alloc_retries, num_ooms
    if leftover > LEFTOVER_LIMIT_BYTES:
        return False, f"{format_bytes(leftover)} still allocated after batch {batch_size}", leftover
    return True, None, leftover


def _clean_cpu(batch_size: int) -> tuple[bool, str | None, int | None]:
    _release_host_memory()
    if not reset_peak_rss():
        return False, "the peak RSS cannot be reset on this system", None
    resident = peak_rss_bytes()  # just reset: the current RSS
    first = _FIRST_RESIDENT.setdefault("bytes", resident)
    grown = max(0, resident - first)
    if grown > LEFTOVER_LIMIT_BYTES:
        return False, f"{format_bytes(grown)} more resident after batch {batch_size} than after the first size", grown
    return True, None, grown


_FIRST_RESIDENT: dict[str, int] = {}  # the RSS after this process's first size, cleaned up


def clean_up(result: TrialResult, torch: Any) -> tuple[bool, str | None, int | None]:
    """Bring the process back to a fresh one's state: (reusable, why not, bytes carried over)."""
    if result.status == records.CUDA_ERROR:
        return False, "a sticky CUDA error: the context is unusable", None
    if torch is None:
        return False, "torch could not be imported", None
    gc.collect()
    kind = result.device.get("type")
    if kind == "cuda":
        try:
            return _clean_cuda(torch, torch.device("cuda", result.device.get("index") or 0), result.batch_size)
        except Exception as exc:  # noqa: BLE001  (a context that refuses to clean up is not reused)
            return False, f"cleaning up failed: {one_line(exc)}", None
    if kind == "cpu":
        return _clean_cpu(result.batch_size)
    return False, "no device was set up", None


def _reply(replies: BinaryIO, message: dict[str, Any]) -> None:
    replies.write(json.dumps(message).encode() + b"\n")
    replies.flush()


def serve(commands: BinaryIO, replies: BinaryIO) -> int:
    torch = _import_torch()
    _reply(replies, {"ready": True})
    for line in commands:
        request = json.loads(line)
        spec = TrialSpec.from_dict(json.loads(Path(request["spec"]).read_text()))
        result = run_trial(spec)
        write_atomic(Path(request["result"]), json.dumps(result.to_dict()).encode())
        torch = torch or sys.modules.get("torch")
        reusable, why, leftover = clean_up(result, torch)
        _reply(replies, {"reusable": reusable, "why": why, "leftover_bytes": leftover})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpudoctor.sweep.worker")
    parser.add_argument("--commands", required=True, type=int, help="file descriptor to read requests from")
    parser.add_argument("--replies", required=True, type=int, help="file descriptor to answer on")
    args = parser.parse_args(argv)
    with os.fdopen(args.commands, "rb") as commands, os.fdopen(args.replies, "wb") as replies:
        return serve(commands, replies)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # As in gpudoctor.sweep.trial: no interpreter teardown on a possibly broken context.
    os._exit(code)
