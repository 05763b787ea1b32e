"""What re-predicting a workload needs of its diagnose, kept in a few bundle files.

A `gpudoctor diagnose --out DIR/` writes the report, the Session (`STEM.session.json`) and
the primary profiler window's trace (`STEM.trace.json.gz`, the window `Session.profile`
names in `trace_file`; diagnose keeps no other window's trace). The Session is what
`gpudoctor report` re-judges; the trace is what the replay reads again. Both are scrubbed
of machine paths and the host name (scripts/scrub_fixture.py: the interpreter and
site-packages prefixes, then the run's own directories as placeholders) and appended, per
workload, to two uncompressed tar files in the corpus output, each member gzip-compressed:

    OUT/sessions-STAMP.tar   WORKLOAD/session.json.gz              (tens of kB a workload)
    OUT/traces-STAMP.tar     WORKLOAD/window.trace.json.gz         (0.1-3 MB a workload)

STAMP is the run's start (UTC), so the bundles of several runs (one per GPU call) sit side
by side in one results directory, and each corpus.json entry names the files that hold
its members (`entry["kept"]`). A traces bundle past `limit_bytes` goes on in
`traces-STAMP-2.tar`, and so on: each file stays under what one transfer brings back. A
trace over that limit on its own (a main-process loader traced with Python stacks: 80 MB
compressed) is not kept, and the record says so; the Session still is.
gzip and not xz: xz saves a third but costs ~10x the time, on the GPU machine's clock.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import re
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import manifest

_spec = importlib.util.spec_from_file_location("scrub_fixture", manifest.ROOT / "scripts" / "scrub_fixture.py")
assert _spec is not None and _spec.loader is not None
scrub_fixture = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scrub_fixture)

SESSION_MEMBER = "session.json.gz"
TRACE_MEMBER = "window.trace.json.gz"
DEFAULT_LIMIT_BYTES = 15 * 2**20


def scrub(data: bytes, replacements: list[tuple[str, str]]) -> bytes:
    """DATA (JSON, gzip or not) as text scrubbed of machine paths, gzip-compressed."""
    raw = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    text = str(scrub_fixture.scrub(raw.decode(), replacements))
    return gzip.compress(text.encode(), compresslevel=6, mtime=0)


def replacements(tmp: Path | None, public: Path) -> list[tuple[str, str]]:
    """The run's own directories as the manifest's placeholders, the most specific first."""
    pairs = [(str(public.resolve()), "{public}"), (str(public), "{public}"),
             (str(manifest.CORPUS), "{corpus}"), (str(manifest.ROOT), "{root}")]
    if tmp is not None:
        pairs.append((str(tmp), "{tmp}"))
    return sorted(pairs, key=lambda p: -len(p[0]))


TMP_DIRECTORY = re.compile("/[^\"\\s']*/gd-corpus-[^/\"\\s']+")  # a run's scratch directory (run.py)


def scrub_record(text: str) -> str:
    """corpus.json or .md text without machine paths: error tails quote the workloads' stderr."""
    text = TMP_DIRECTORY.sub("{tmp}", text)
    return str(scrub_fixture.scrub(text, replacements(None, manifest.PUBLIC)))


@dataclass
class Bundles:
    """The tar files one corpus run appends its workloads' sessions and traces to."""

    directory: Path
    stamp: str
    limit_bytes: int = DEFAULT_LIMIT_BYTES

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._trace_part = 1

    def _traces_name(self) -> str:
        return f"traces-{self.stamp}.tar" if self._trace_part == 1 else f"traces-{self.stamp}-{self._trace_part}.tar"

    def keep(self, workload: str, report_dir: Path, scrubbed: list[tuple[str, str]]) -> dict[str, Any]:
        """Append WORKLOAD's session and window trace from REPORT_DIR; the record corpus.json keeps."""
        sessions = sorted(report_dir.glob("*.session.json"))
        if not sessions:
            return {"why": "diagnose wrote no session"}
        session = scrub(sessions[0].read_bytes(), scrubbed)
        traces = sorted(report_dir.glob("*.trace.json.gz"))
        trace = scrub(traces[0].read_bytes(), scrubbed) if traces else None
        with self._lock:
            kept: dict[str, Any] = {"sessions": f"sessions-{self.stamp}.tar", "session": f"{workload}/{SESSION_MEMBER}",
                                    "session_bytes": len(session), "traces": None, "trace": None}
            _append(self.directory / kept["sessions"], kept["session"], session)
            if trace is None:
                kept["why_no_trace"] = "diagnose wrote no window trace (no profiler window)"
                return kept
            if len(trace) + 1024 > self.limit_bytes:
                kept["why_no_trace"] = (f"the window trace is {len(trace) / 2**20:.0f} MiB compressed, over what one "
                                        f"transfer brings back ({self.limit_bytes / 2**20:.0f} MiB)")
                return kept
            path = self.directory / self._traces_name()
            if path.exists() and path.stat().st_size + len(trace) + 1024 > self.limit_bytes:
                self._trace_part += 1
                path = self.directory / self._traces_name()
            _append(path, f"{workload}/{TRACE_MEMBER}", trace)
            kept.update(traces=path.name, trace=f"{workload}/{TRACE_MEMBER}", trace_bytes=len(trace))
            return kept


def _append(path: Path, member: str, data: bytes) -> None:
    info = tarfile.TarInfo(member)
    info.size = len(data)
    info.mode = 0o644
    with tarfile.open(path, "a" if path.exists() else "w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))


def read_member(directory: Path, bundle: str, member: str) -> bytes:
    """One kept file, decompressed: the last copy of MEMBER in DIRECTORY/BUNDLE (a re-run appends again)."""
    with tarfile.open(directory / bundle) as tar:
        infos = [i for i in tar.getmembers() if i.name == member]
        if not infos:
            raise KeyError(f"{bundle} holds no {member}")
        handle = tar.extractfile(infos[-1])
        assert handle is not None
        return gzip.decompress(handle.read())
