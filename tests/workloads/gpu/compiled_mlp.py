"""GPU workload: a small MLP trained under torch.compile (the overhead benchmark's compile case).

    python compiled_mlp.py [--steps N]
"""

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    device = torch.device("cuda")
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(2048, 2048), torch.nn.GELU()]
    model = torch.compile(torch.nn.Sequential(*layers).to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(1024, 2048, device=device)
    for _ in range(args.steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
