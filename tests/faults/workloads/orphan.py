"""Leaves a process behind: starts a helper in a session of its own (so it is not in the
workload's process group), waits until it runs, prints its pid and exits."""
import subprocess
import sys

helper = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(120)",
                           "--password", "Zq7s3cr3tValue42"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          stdin=subprocess.DEVNULL, start_new_session=True)
helper.stdout.readline()
print(f"helper pid {helper.pid}", flush=True)
