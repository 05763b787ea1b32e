"""Fault: an uncaught exception (no torch)."""
raise RuntimeError("fault: the workload raised")
