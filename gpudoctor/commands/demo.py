"""`gpudoctor demo`: diagnose the bundled example workload (a starved input pipeline).

It runs in under a minute on a 2-core machine, on the GPU when there is one, and
writes a report like any other run. `--fixed` runs the same loop with the number
of DataLoader workers the first diagnosis recommends, for a before/after pair.
"""

from __future__ import annotations

import argparse
import sys

from gpudoctor.commands.diagnose import add_output_options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="diagnose a bundled example workload with an input-pipeline problem")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="DataLoader workers in the demo loop (default 0: the problem)")
    p.add_argument("--steps", type=int, default=60, metavar="N", help="training steps (default 60)")
    add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpudoctor.pipeline import diagnose_and_report

    command = [sys.executable, "-m", "gpudoctor.demo.workload", "--workers", str(args.workers),
               "--steps", str(args.steps)]
    for name, value in (("duration", None), ("steps", None), ("grace", 10.0), ("interval", 0.5),
                        ("no_profile", False), ("profile_steps", 10), ("warmup_steps", 5), ("data", []),
                        ("stepless_after", 3.0), ("stepless_window", 2.0),
                        ("profile_windows", 4), ("profile_later", 60.0), ("no_loader_profile", False)):
        setattr(args, name, value)
    print(f"gpudoctor demo: {' '.join(command[1:])}", file=sys.stderr)
    return diagnose_and_report(args, command, "demo" if args.workers == 0 else f"demo-workers{args.workers}")
