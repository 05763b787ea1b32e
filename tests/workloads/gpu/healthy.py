"""GPU workload: a healthy bf16 training loop of large matmuls (no critical finding expected).

Data is generated on the GPU; the model is wide enough that every kernel runs for
milliseconds and tensor cores do the work.
"""

import torch

STEPS = 400


def main():
    device = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(8192, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 8192)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    for _ in range(STEPS):
        x = torch.randn(16384, 8192, device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
