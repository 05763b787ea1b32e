"""Fault: os._exit(n): no atexit, no traceback, buffers not flushed."""
import os
import sys

sys.stdout.write("lost line, never flushed")
os._exit(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
