"""Workload: pure compute, no DataLoader (tensors made on the fly).

Known answer: no input-pipeline finding (GD101/GD102/GD104 skipped: no DataLoader).
"""

import torch


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 512)
    for _ in range(60):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("done")


if __name__ == "__main__":
    main()
