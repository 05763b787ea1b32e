"""Workload: trains a few steps, then exits with code 3 (the code gpudoctor must return)."""

import sys

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(10):
    loss = model(torch.randn(4, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("exiting with 3")
sys.exit(3)
