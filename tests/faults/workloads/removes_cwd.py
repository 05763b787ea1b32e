"""Removes the directory it was started from (and gpudoctor's, the same), then exits 0."""
import os
import shutil

print("workload ran", flush=True)
shutil.rmtree(os.getcwd())
