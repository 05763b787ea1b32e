"""Fault: host memory pressure (light): holds ~300 MB of touched memory for a second, exits 0."""
import time

blocks = [bytearray(b"\x01") * (50 << 20) for _ in range(6)]  # written, so resident
time.sleep(1.2)
print("held", sum(len(b) for b in blocks) >> 20, "MiB", flush=True)
