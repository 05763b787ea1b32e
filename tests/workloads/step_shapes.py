"""One small CPU loop per shape of step boundary, to check which source gpudoctor uses.

    python step_shapes.py MODE [SECONDS]

explicit: gpudoctor.step() after each iteration (an optimizer steps too: explicit wins);
optimizer: forward, backward, optimizer.step(); backward: forward and backward, a
hand-written update, no optimizer; loader: a DataLoader feeding a forward under
no_grad; forward: forwards only.
"""
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import gpudoctor

mode = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(32, 64), torch.randn(32, 1)
loader = DataLoader(TensorDataset(torch.randn(64 * 32, 64)), batch_size=32)
deadline = time.time() + seconds
iterations = 0
while time.time() < deadline:
    if mode == "loader":
        with torch.no_grad():
            for (batch,) in loader:
                model(batch)
        iterations += 1
        continue
    out = model(x)
    if mode != "forward":
        loss = torch.nn.functional.mse_loss(out, y)
        loss.backward()
        if mode in ("optimizer", "explicit"):
            opt.step()
            opt.zero_grad()
        else:
            with torch.no_grad():
                for p in model.parameters():
                    p -= 1e-3 * p.grad
                    p.grad = None
    if mode == "explicit":
        gpudoctor.step()
    iterations += 1
print(mode, iterations, flush=True)
