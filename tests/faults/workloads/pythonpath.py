"""Fault: sets PYTHONPATH itself (from scratch) before starting a Python child; exits with its code."""
import os
import subprocess
import sys

env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
code = subprocess.call([sys.executable, "-c", "import time; time.sleep(1.2); raise SystemExit(6)"], env=env)
sys.exit(code)
