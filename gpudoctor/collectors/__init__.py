"""Collectors: what the supervisor measures beside the workload (NVML, traces, ...).

Each collector turns hardware or files into Session facts and never raises into the
supervisor: what it cannot measure it reports as unavailable, with the reason.
"""
