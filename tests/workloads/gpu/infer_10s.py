"""GPU workload: a batch-1 inference loop of about 10 seconds, an nn.Module and nothing else.

No DataLoader, no optimizer, no backward: the outermost module forward marks the steps.
Known answer: a profiler window early in the run (not 10 s in), GD301 launch-bound (a few
dozen tiny kernels per batch-1 forward, the GPU waits on launches), GD201 as its consequence.

    python infer_10s.py [--seconds S] [--device cuda|cpu]
"""

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    layers = []
    for _ in range(12):
        layers += [torch.nn.Linear(512, 512), torch.nn.LayerNorm(512), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(512, 10)).to(device).eval()
    x = torch.randn(1, 512, device=device)
    count = 0
    deadline = time.time() + args.seconds
    with torch.inference_mode():
        while time.time() < deadline:
            model(x)
            count += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"inferences {count}")


if __name__ == "__main__":
    main()
