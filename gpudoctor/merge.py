"""Join the Sessions of a multi-node job (one `gpudoctor diagnose` per node) into one.

Each node's Session holds that node's ranks (`Session.ranks`). The merged Session is
the Session of the node that holds the lowest rank (rank 0: the primary view, see
gpudoctor/assemble.py) with every node's ranks, errors and notes added, so the
single-GPU checks read rank 0's node as before and the multi-GPU checks (GD5xx) see
all ranks. Bad input is refused with one line (`MergeError`): a Session without
ranks, Sessions of different jobs or world sizes, a rank recorded twice.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from gpudoctor.session import Session


class MergeError(Exception):
    """The Sessions do not form one job; the message says why (one line)."""


def merge_sessions(sessions: Sequence[tuple[str, Session]]) -> Session:
    """`sessions`: (name for messages, Session) per node, in any order."""
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
    seen: dict[int, str] = {}
    for name, session in sessions:
        for info in session.ranks:
            if info.rank in seen:
                raise MergeError(f"rank {info.rank} is recorded twice ({seen[info.rank]} and {name})")
            seen[info.rank] = name
    base_name, base = min(sessions, key=lambda pair: min(r.rank for r in pair[1].ranks))
    merged = copy.deepcopy(base)
    others = [(name, s) for name, s in sessions if s is not base]
    for name, session in others:
        merged.ranks.extend(copy.deepcopy(session.ranks))
        merged.errors.extend(copy.deepcopy(session.errors))
        merged.notes.extend(f"{name}: {note}" for note in session.notes)
        merged.duration_s = max(merged.duration_s, session.duration_s)
        if merged.exit_code in (0, None) and session.exit_code not in (0, None):
            merged.exit_code = session.exit_code
    merged.ranks.sort(key=lambda r: r.rank)
    merged.job_id = next(iter(jobs), None)
    merged.primary_rank = merged.ranks[0].rank
    hosts = sorted({r.host for r in merged.ranks if r.host})
    merged.notes.append(f"merged from {len(sessions)} sessions ({', '.join(hosts) or 'hosts unknown'}); the "
                        f"steps, loaders, GPU samples and profiler window are those of {base_name} "
                        f"(rank {merged.primary_rank})")
    world = next(iter(sizes), None)
    if world is not None and len(merged.ranks) < world:
        missing = sorted(set(range(world)) - {r.rank for r in merged.ranks})
        merged.notes.append(f"{len(missing)} of {world} ranks are missing (not recorded in these sessions): "
                            + ", ".join(str(r) for r in missing[:20]))
    return merged
