"""GPU workload: a loop that calls backward() but never an optimizer (a hand-written SGD update).

backward() calls mark the steps (no optimizer, no DataLoader). Known answer: steps from
backward, a step-driven profiler window; the per-parameter update loop makes it launch-bound
(GD301).

    python backward_only.py [--seconds S]
"""

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    device = torch.device("cuda")
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(256, 1)).to(device)
    x, y = torch.randn(32, 256, device=device), torch.randn(32, 1, device=device)
    steps = 0
    deadline = time.time() + args.seconds
    while time.time() < deadline:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():  # SGD by hand: two small kernels per parameter
                p -= 1e-3 * p.grad
                p.grad = None
        steps += 1
    torch.cuda.synchronize()
    print(f"steps {steps}, loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
