"""Fault: killed by SIGKILL, as the kernel's OOM killer does."""
import os
import signal
import time

time.sleep(0.3)
os.kill(os.getpid(), signal.SIGKILL)
