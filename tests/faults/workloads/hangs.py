"""Fault: hangs (sleeps forever); with argv[1] == "stubborn" it ignores SIGINT and SIGTERM."""
import signal
import sys
import time

if len(sys.argv) > 1 and sys.argv[1] == "stubborn":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("hanging", flush=True)
while True:
    time.sleep(3600)
