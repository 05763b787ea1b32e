"""Fault: changes the working directory (to an empty temporary one, then removes it), then raises."""
import os
import shutil
import tempfile

where = tempfile.mkdtemp(prefix="gd-chdir-")
os.chdir(where)
shutil.rmtree(where)  # the cwd no longer exists
raise RuntimeError("crashed in a deleted directory")
