"""Fault: sys.exit(n) (n from argv, default 7)."""
import sys

print("calling sys.exit", flush=True)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
