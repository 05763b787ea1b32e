"""GPU workload: a deep stack of tiny layers on a tiny batch (launch-bound).

Known answer: GD301 first (thousands of kernels of a few microseconds, the GPU waits
on launches), GD201 as its consequence. No DataLoader.
"""

import torch

STEPS = 300


def build():
    """(model, optimizer, batch): 40 blocks of tiny layers, a per-parameter AdamW, a tiny batch."""
    device = torch.device("cuda")
    layers = []
    for _ in range(40):
        layers += [torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)  # per-parameter kernels
    return model, opt, torch.randn(16, 64, device=device)


def main():
    model, opt, x = build()
    for _ in range(STEPS):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
