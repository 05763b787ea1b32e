"""GPU workload: large fp32 matmuls with TF32 disabled (the default "highest" precision).

Known answer: GD304 (matmuls in full fp32; tensor cores idle). ``--tf32`` is the remedy
applied by hand (the accuracy corpus): the same line, set to True.
"""

import sys

import torch

STEPS = 40


def main():
    torch.backends.cuda.matmul.allow_tf32 = "--tf32" in sys.argv[1:]
    device = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(8192, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 8192)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(8192, 8192, device=device)
    for _ in range(STEPS):
        loss = model(x).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
