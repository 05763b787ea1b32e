"""Join the Sessions of a multi-node job (one `gpudoctor diagnose` per node) into one.

Each node's Session holds that node's ranks (`Session.ranks`). The merged Session is
the Session of the node that holds the lowest rank (rank 0: the primary view, see
gpudoctor/run/assemble.py) with every node's ranks, errors and notes added, so the
single-GPU checks read rank 0's node as before and the multi-GPU checks (GD5xx) see
all ranks. Bad input is refused with one line (`MergeError`): a Session without
ranks, Sessions of different jobs or world sizes, a rank recorded twice or outside the
world size. The merged Session stays within what a loaded Session may hold
(gpudoctor/session/limits.py), however many nodes: the notes and errors past those
limits are counted, not kept, so `gpudoctor report` reads what `merge` wrote.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from gpudoctor.session import Session
from gpudoctor.session.limits import MAX_ITEMS


class MergeError(Exception):
    """The Sessions do not form one job; the message says why (one line)."""


def merge_sessions(sessions: Sequence[tuple[str, Session]]) -> Session:
    """`sessions`: (name for messages, Session) per node, in any order."""
    job_id, world = _validate(sessions)
    base_name, base = min(sessions, key=lambda pair: min(r.rank for r in pair[1].ranks))
    merged = copy.deepcopy(base)
    for name, session in sessions:
        if session is not base:
            _add_node(merged, name, session)
    merged.ranks.sort(key=lambda r: r.rank)
    merged.job_id = job_id
    merged.primary_rank = merged.ranks[0].rank
    _bound(merged, _own_notes(merged, len(sessions), base_name, world))
    return merged


def _validate(sessions: Sequence[tuple[str, Session]]) -> tuple[str | None, int | None]:
    """The job's ID and world size, or MergeError: the Sessions do not form one job."""
    if not sessions:
        raise MergeError("no sessions to merge")
    for name, session in sessions:
        if not session.ranks:
            raise MergeError(f"{name}: not a distributed job (no torch.distributed ranks recorded): nothing to merge")
    jobs = {s.job_id for _, s in sessions if s.job_id}
    if len(jobs) > 1:
        raise MergeError(f"the sessions come from different jobs ({', '.join(sorted(jobs))})")
    sizes = {r.world_size for _, s in sessions for r in s.ranks if r.world_size}
    if len(sizes) > 1:
        raise MergeError(f"the sessions disagree on the world size ({', '.join(str(n) for n in sorted(sizes))})")
    world = next(iter(sizes), None)
    seen: dict[int, str] = {}
    for name, session in sessions:
        for info in session.ranks:
            if world is not None and not 0 <= info.rank < world:
                raise MergeError(f"{name}: rank {info.rank} is outside the job's world of {world} ranks "
                                 f"(0-{world - 1})")
            if info.rank in seen:
                raise MergeError(f"rank {info.rank} is recorded twice ({seen[info.rank]} and {name})")
            seen[info.rank] = name
    return next(iter(jobs), None), world


def _add_node(merged: Session, name: str, session: Session) -> None:
    """Another node's ranks, errors and notes; the longest duration; the first failing exit code."""
    merged.ranks.extend(copy.deepcopy(session.ranks))
    merged.errors.extend(copy.deepcopy(session.errors))
    merged.notes.extend(f"{name}: {note}" for note in session.notes)
    merged.duration_s = max(merged.duration_s, session.duration_s)
    if merged.exit_code in (0, None) and session.exit_code not in (0, None):
        merged.exit_code = session.exit_code


def _own_notes(merged: Session, count: int, base_name: str, world: int | None) -> list[str]:
    """The merge's notes: what was merged and whose view is primary; the ranks missing."""
    hosts = sorted({r.host for r in merged.ranks if r.host})
    shown = ", ".join(hosts[:8]) + (f", ... ({len(hosts)} hosts)" if len(hosts) > 8 else "")
    own = [(f"merged from {count} sessions ({shown or 'hosts unknown'}); the steps, loaders, GPU samples "
            f"and profiler window are those of {base_name} (rank {merged.primary_rank})")]
    if world is not None and len(merged.ranks) < world:
        missing = sorted(set(range(world)) - {r.rank for r in merged.ranks})
        own.append(f"{len(missing)} of {world} ranks are missing (not recorded in these sessions): "
                   + ", ".join(str(r) for r in missing[:20]))
    return own


def _bound(merged: Session, own: list[str]) -> None:
    """Notes and errors within the limits a loaded Session is held to (what is left out is
    counted), then the merge's `own` notes, always kept."""
    counts = []
    limit = MAX_ITEMS["errors"]
    if len(merged.errors) > limit:
        counts.append(f"{len(merged.errors) - limit} more errors of the merged sessions are left out")
        del merged.errors[limit:]
    room = MAX_ITEMS["notes"] - len(own) - len(counts) - 1
    if len(merged.notes) > room:
        counts.insert(0, f"{len(merged.notes) - room} more notes of the merged sessions are left out")
        del merged.notes[room:]
    merged.notes.extend([*counts, *own])
