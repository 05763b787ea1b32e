"""Counts the SIGINTs it gets: says "ready", waits for the first, then 1.5 s more for a
duplicate, prints the count and exits 0."""
import signal
import time

count = 0


def handler(signum, frame):
    global count
    count += 1


signal.signal(signal.SIGINT, handler)
print("ready", flush=True)
while count == 0:
    time.sleep(0.05)
time.sleep(1.5)
print(f"SIGINT count: {count}", flush=True)
