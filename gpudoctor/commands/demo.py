"""`gpudoctor demo`: diagnose the bundled example workload (a starved input pipeline).

It runs in under a minute on a 2-core machine, on the GPU when there is one, and
writes a report like any other run. `--fixed` runs the same loop with the number
of DataLoader workers the first diagnosis recommends, for a before/after pair.
"""

from __future__ import annotations

import argparse
import sys

from gpudoctor.commands.diagnose import add_output_options, report_options


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="diagnose a bundled example workload with an input-pipeline problem")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="DataLoader workers in the demo loop (default 0: the problem)")
    p.add_argument("--steps", type=int, default=60, metavar="N", help="training steps (default 60)")
    add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpudoctor.pipeline import DiagnoseRequest, diagnose_and_report
    from gpudoctor.run.supervisor import RunOptions

    command = [sys.executable, "-m", "gpudoctor.demo.workload", "--workers", str(args.workers),
               "--steps", str(args.steps)]
    print(f"gpudoctor demo: {' '.join(command[1:])}", file=sys.stderr)
    # the demo bounds itself (--steps goes to the workload): diagnose's measuring defaults, no bound of ours
    request = DiagnoseRequest(run=RunOptions(command=command), report=report_options(args),
                              stem="demo" if args.workers == 0 else f"demo-workers{args.workers}")
    return diagnose_and_report(request)
