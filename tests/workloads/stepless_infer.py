"""An inference loop with no step boundary: no DataLoader, no optimizer, no gpudoctor.step().

gpudoctor profiles such a run through a time-bounded window. On a CPU machine the
window would never open (it waits for CUDA), so with --fake-cuda this script says
CUDA is initialised, as tests/faults/workloads/profiler_fails.py does.

    python stepless_infer.py SECONDS [--fake-cuda] [--compile]

--compile wraps the model in torch.compile (the eager backend: no compiler needed).
"""
import sys
import time

import torch

if "--fake-cuda" in sys.argv:
    torch.cuda.is_initialized = lambda: True

model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16)).eval()
if "--compile" in sys.argv:
    model = torch.compile(model, backend="eager")
x = torch.randn(64, 256)
deadline = time.time() + float(sys.argv[1])
count = 0
with torch.inference_mode():
    while time.time() < deadline:
        model(x)
        count += 1
print("inferences", count, flush=True)
