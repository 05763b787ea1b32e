"""Fault: closes its stdout (fd 1) and points sys.stdout/sys.stderr elsewhere, then exits 4."""
import io
import os
import sys

print("before closing", flush=True)
os.close(1)
sys.stdout = io.StringIO()
sys.stderr = io.StringIO()
print("into the void")
sys.exit(4)
