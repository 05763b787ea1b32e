"""Fault for gpudoctor: the report directory (argv[1]) becomes unusable during the run
(removed and replaced by a file), then the workload exits 5."""
import shutil
import sys

target = sys.argv[1]
shutil.rmtree(target)
with open(target, "w") as fh:
    fh.write("not a directory any more\n")
sys.exit(5)
