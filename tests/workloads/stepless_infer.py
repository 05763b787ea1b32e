"""An inference loop with no DataLoader, no optimizer, no backward and no gpudoctor.step().

With a module (the default), the outermost module forward marks the steps. With
--no-module nothing does: gpudoctor profiles it through a time-bounded window opened at
one of the loop's own tensor calls. On a CPU machine that window would never open (it
waits for CUDA), so with --fake-cuda this script says CUDA is initialised, as
tests/faults/workloads/profiler_fails.py does.

    python stepless_infer.py SECONDS [--fake-cuda] [--compile] [--no-module]

--compile wraps the model in torch.compile (the eager backend: no compiler needed).

SECONDS is a count, not a deadline: the loop runs SECONDS / PERIOD iterations and each one
lasts at least PERIOD (a sleep). A loaded machine makes the run longer, never shorter in
iterations, so gpudoctor's windows (counted in forwards, or in seconds after CUDA started)
see the same loop whatever the load: a deadline let a profiler start that took seconds
under load outlast the loop (issue 15).
"""
import sys
import time

import torch

if "--fake-cuda" in sys.argv:
    torch.cuda.is_initialized = lambda: True

PERIOD = 0.02  # s: each iteration lasts at least this long

torch.set_num_threads(1)
iterations = round(float(sys.argv[1]) / PERIOD)
count = 0
if "--no-module" in sys.argv:
    x = torch.randn(256, 512, dtype=torch.float64)
    w = torch.randn(512, 512)
    while count < iterations:
        (x.to(torch.float32) @ w).relu_()  # a copy (a safe point) and a matmul, no module
        count += 1
        time.sleep(PERIOD)
else:
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16)).eval()
    if "--compile" in sys.argv:
        model = torch.compile(model, backend="eager")
    x = torch.randn(64, 256)
    with torch.inference_mode():
        while count < iterations:
            model(x)
            count += 1
            time.sleep(PERIOD)
print("inferences", count, flush=True)
