"""GPU workload: per-step host synchronisations (.item() on several values each step).

Known answer: GD302 (syncs per step, call sites in this file). The matmuls are big
enough that the GPU would otherwise stay busy.
"""

import torch

STEPS = 200


def main():
    torch.backends.cuda.matmul.allow_tf32 = True  # one known problem only: no fp32 matmul finding
    device = torch.device("cuda")
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(6)]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(512, 2048, device=device)
    history = []
    for _ in range(STEPS):
        out = model(x)
        loss = out.square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        # logging that forces the CPU to wait for the GPU, several times a step
        history.append(loss.item())
        grad_norm = sum(p.grad.norm().item() for p in model.parameters() if p.grad is not None)
        history.append(grad_norm)
        opt.step()
    print("done", len(history))


if __name__ == "__main__":
    main()
