"""Fault: a segmentation fault in native code (reads address 0)."""
import ctypes
import time

time.sleep(0.3)
ctypes.string_at(0)
