"""Hostile: plays with file descriptors the way daemons and shells do.

    descriptors.py closerange OUT.csv   closes every descriptor above 2, opens its own CSV
                                        (it gets the agent's old number) and keeps it open
                                        until exit, when the agent writes its last events
    descriptors.py inherited FD         writes a line to descriptor FD it inherited
                                        (`3>log` from a shell)
"""
import os
import sys

MODE = sys.argv[1]
if MODE == "closerange":
    os.closerange(3, 1024)
    out = open(sys.argv[2], "w")  # noqa: SIM115 (kept open on purpose, see above)
    out.write("step,loss\n")
    out.writelines(f"{step},{1.0 / (step + 1):.3f}\n" for step in range(5))
    out.flush()
    raise SystemExit(0)  # `out` is still open while the agent's exit handler runs
if MODE == "inherited":
    os.write(int(sys.argv[2]), b"the workload wrote this\n")
