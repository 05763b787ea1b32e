"""Fault: torch.profiler cannot start (as when CUPTI is busy or missing); the loop must go on.

On a CPU machine gpudoctor opens its profiler window only once CUDA is initialised, so
this workload says it is, then breaks torch.profiler.profile.start().
"""
import torch
import torch.profiler
from torch.utils.data import DataLoader


class BrokenProfiler:
    def __init__(self, *args, **kwargs):
        pass

    def start(self):
        raise RuntimeError("fault: CUPTI_ERROR_NOT_INITIALIZED, the profiler cannot start")


torch.profiler.profile = BrokenProfiler
torch.cuda.is_initialized = lambda: True
total = 0.0
for batch in DataLoader(list(range(40)), batch_size=2):
    total += float(batch.sum())
print("loop done", total, flush=True)
