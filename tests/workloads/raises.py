"""Workload: trains a few steps, then raises (traceback as usual, exit code 1)."""

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):  # noqa: B007  (the error below names the last step)
    loss = model(torch.randn(4, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
raise ValueError(f"diverged at step {step}: loss is nan")
