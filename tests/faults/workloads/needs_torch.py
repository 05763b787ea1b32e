"""Fault: run by an interpreter that has no torch: the import fails (ModuleNotFoundError)."""
import torch  # noqa: F401
