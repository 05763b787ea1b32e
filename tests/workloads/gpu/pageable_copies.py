"""GPU workload: large host-to-device copies from pageable (not pinned) memory each step.

Known answer: GD303 (copies dominate GPU time) and GD105 (pageable memory).
"""

import torch

STEPS = 200


def main():
    device = torch.device("cuda")
    model = torch.nn.Linear(4096, 256).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    host_batches = [torch.randn(16384, 4096) for _ in range(2)]  # 256 MiB each, pageable
    for step in range(STEPS):
        x = host_batches[step % 2].to(device)  # synchronous pageable copy
        loss = model(x).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
