"""Replay a recorded session's profiler window again, with this checkout's replay.

The replay runs when a Session is assembled (gpudoctor.run.supervisor). Sessions recorded
on the GPU machine are test fixtures; when the replay model changes, their stored
`profile.replay` is recomputed from the trace recorded with them:

    python scripts/replay_fixture.py SESSION.json TRACE.json.gz [--write]

Prints the scenarios and predicted gains; with --write, stores the new replay in SESSION.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpudoctor.collectors.trace import load_trace, trace_events
from gpudoctor.collectors.windows import primary_calibration_steps
from gpudoctor.replay import replay_or_error
from gpudoctor.replay.scenarios import gain
from gpudoctor.session import Session


def replay_session(session: Session, trace: Path):
    assert session.profile is not None, "the session has no profiler window"
    return replay_or_error(trace_events(load_trace(trace)), session.profile.steps,
                           primary_calibration_steps(session), source=session.profile.step_source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("session")
    parser.add_argument("trace")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    path = Path(args.session)
    session = Session.load(path)
    replay = replay_session(session, Path(args.trace))
    if replay is None:
        print("no host thread to replay")
        return
    print(f"{path.name}: {replay.calibration}")
    for scenario in replay.scenarios:
        print(f"  {scenario.name:13s} {gain(replay, scenario.name) or 1.0:6.2f}x  {scenario.detail}")
    if args.write:
        data = json.loads(path.read_text())
        assert session.profile is not None
        session.profile.replay = replay
        # the replay only: the rest of the profile stays as recorded, to the byte (whole numbers too)
        data["profile"]["replay"] = session.to_dict()["profile"]["replay"]
        path.write_text(json.dumps(data, separators=(",", ":"), allow_nan=False))  # compact, as written by diagnose


if __name__ == "__main__":
    main()
