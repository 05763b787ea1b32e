"""Add the window picture (idle gaps by cause, a few steps to draw) to a recorded session.

The picture is computed when a Session is assembled (collectors/window_picture.py, and the
replay's what-if rows in replay/scenarios.py). Sessions recorded before it existed are test
fixtures whose profiler window was recorded with them; this adds what this checkout computes
from that window, leaving every other number as recorded:

    python scripts/picture_fixture.py SESSION.json TRACE.json.gz [--write]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpudoctor.collectors.trace import load_trace, summarize_trace, trace_events
from gpudoctor.collectors.windows import primary_calibration_steps
from gpudoctor.replay import replay_or_error
from gpudoctor.session import Session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("session")
    parser.add_argument("trace")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    path = Path(args.session)
    session = Session.load(path)
    assert session.profile is not None, "the session has no profiler window"
    events = trace_events(load_trace(Path(args.trace)))
    summary = summarize_trace(events, steps=session.profile.steps)
    replay = replay_or_error(events, session.profile.steps, primary_calibration_steps(session),
                             source=session.profile.step_source)
    print(f"{path.name}: idle {summary.gpu_idle_us / 1e3:.1f} ms: "
          + ", ".join(f"{k} {v / 1e3:.1f} ms" for k, v in summary.idle_by_cause_us.items()))
    data = json.loads(path.read_text())
    stored = data["profile"]
    new = Session(profile=summary).to_dict()["profile"]
    stored["idle_by_cause_us"], stored["picture"] = new["idle_by_cause_us"], new["picture"]
    old_replay = stored.get("replay")
    if replay is not None and old_replay and not old_replay.get("error"):
        fresh = Session(profile=type(summary)(replay=replay)).to_dict()["profile"]["replay"]
        for key in ("baseline_picture", "baseline_picture_bins", "baseline_picture_span_us"):
            old_replay[key] = fresh[key]
        by_name = {s["name"]: s for s in fresh["scenarios"]}
        for scenario in old_replay.get("scenarios") or []:
            drawn = by_name.get(scenario["name"], {})
            for key in ("picture", "picture_bins", "picture_span_us"):
                scenario[key] = drawn.get(key, None if key.endswith("_us") else [])
    if data.get("profiles"):
        for window in data["profiles"]:
            if window.get("index") == stored.get("index") and window.get("label") == stored.get("label"):
                window.update({k: stored[k] for k in ("idle_by_cause_us", "picture")})
                if window.get("replay") and old_replay:
                    window["replay"] = old_replay
    if args.write:
        path.write_text(json.dumps(data, separators=(",", ":"), allow_nan=False))  # compact, as written by diagnose


if __name__ == "__main__":
    main()
