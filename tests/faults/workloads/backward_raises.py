"""A training loop whose error is raised inside backward() (as CUDA out-of-memory is):
its traceback must read as it would without gpudoctor (no frame of the agent's wrapper)."""

import torch


class Fails(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("fault in backward")


model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    out = model(torch.randn(4, 8))
    loss = (Fails.apply(out) if step == 5 else out).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
