"""A profiler window must not import torch._dynamo / torch._inductor into a run that never compiled.

torch.profiler's start asks ``hasattr(torch, "_inductor")``, and torch answers a lazy
attribute by importing it: the first window then paused the workload's thread for the
import (2.2 s on a CPU, most of the first window's 3.7 s start on an H200) and left
inductor loaded in a process that had not asked for it (issue 24).
"""

from __future__ import annotations

import json
import textwrap

import pytest

pytestmark = pytest.mark.integration  # starts a process

SCRIPT = textwrap.dedent("""
    import sys, time
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU())
    x = torch.randn(32, 64)
    end = time.time() + 2.0
    with torch.inference_mode():  # an inference loop: its forwards are the steps (an optimizer's
        while time.time() < end:  # constructor imports torch._dynamo itself)
            model(x)
    with open(sys.argv[1], "w") as fh:
        fh.write(str(sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules)))
""")


def test_a_window_leaves_inductor_unimported(diagnose, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    seen = tmp_path / "modules.txt"
    run = diagnose("--interval", "0.2", str(script), str(seen))
    assert run.returncode == 0, run.stderr
    session = json.loads(next(run.out.glob("*.session.json")).read_text())
    assert session["profile"] is not None and session["profile"]["steps"] > 0  # a window was taken
    assert seen.read_text() == "[]", "the window imported " + seen.read_text()
