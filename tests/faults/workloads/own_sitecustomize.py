"""Fault: relies on its own sitecustomize (on PYTHONPATH); exits 0 only if it ran."""
import os
import sys

ran = os.environ.get("USER_SITECUSTOMIZE_RAN")
agent = "_gpudoctor_agent" in sys.modules
print("user sitecustomize:", ran, "agent:", agent, flush=True)
sys.exit(0 if ran == "yes" else 12)
