"""Workload: trains until stopped (for --steps, --duration and signal tests)."""

import time

import torch

model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
try:
    while True:
        loss = model(torch.randn(8, 16)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        time.sleep(0.01)
except KeyboardInterrupt:
    print(f"stopped after {step} steps", flush=True)
    raise
