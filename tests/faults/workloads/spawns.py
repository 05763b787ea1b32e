"""Fault: spawns subprocesses (a Python child that fails, a shell), handles the failure, exits 0."""
import subprocess
import sys

child = subprocess.run([sys.executable, "-c", "raise SystemExit('child gave up')"], check=False)
print("child exit", child.returncode, flush=True)
crash = subprocess.run([sys.executable, "-c", "raise ValueError('child crashed')"], capture_output=True, check=False)
print("crashing child exit", crash.returncode, flush=True)
subprocess.run(["sh", "-c", "exit 0"], check=True)
print("done", flush=True)
