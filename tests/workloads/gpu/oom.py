"""GPU workload: batch doubles each step until the GPU runs out of memory (uncaught).

Known answer: GD402 with the memory numbers at the time of the OOM. A memory cap
(10% of the device) keeps the run short.
"""

import torch


def main():
    torch.cuda.set_per_process_memory_fraction(0.10)
    torch.backends.cuda.matmul.allow_tf32 = True  # one known problem only: no fp32 matmul finding
    device = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    batch = 1024
    for step in range(100):
        x = torch.randn(batch, 4096, device=device)
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step >= 8:
            batch *= 2
    print("never reached")


if __name__ == "__main__":
    main()
