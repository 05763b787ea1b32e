"""GPU workload: a CNN trained with batch size 4 from a DataLoader; most GPU memory stays free.

Known answer: GD202 (batch far below what memory allows, with the estimate and the
sweep command to run next). The loader is fast (data already in memory, workers).
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

STEPS = 1000


def main():
    device = torch.device("cuda")
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.BatchNorm2d(256), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    data = TensorDataset(torch.randn(2048, 3, 128, 128), torch.randint(0, 100, (2048,)))
    loader = DataLoader(data, batch_size=4, shuffle=True, num_workers=2, pin_memory=True, persistent_workers=True)
    step = 0
    while step < STEPS:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step >= STEPS:
                break
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
