"""GPU workload: a ``.item()`` after every layer of the forward pass.

Each ``.item()`` waits for the GPU to finish the layer, so the host only queues the
next layer once the GPU has gone idle. The layers' kernels are long enough that,
without the syncs, the host would run ahead and keep the GPU busy.

Known answer: GD302 (host syncs) first, with the larger predicted gain; launch
overhead (GD301), if reported, ranks below it. ``--no-item`` keeps the values on the
GPU (the remedy) and is what the realized gain is measured with.
"""

import argparse

import torch

LAYERS = 16
WIDTH = 2048
BATCH = 2048


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--no-item", action="store_true", help="the remedy: accumulate on the GPU, read once")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True  # one known problem only: no fp32 matmul finding
    device = torch.device("cuda")
    layers = [torch.nn.Linear(WIDTH, WIDTH).to(device) for _ in range(LAYERS)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = torch.optim.SGD(params, lr=1e-5)
    x = torch.randn(BATCH, WIDTH, device=device)
    watched = []
    running = torch.zeros((), device=device)
    for _ in range(args.steps):
        h = x
        for layer in layers:
            h = torch.nn.functional.gelu(layer(h))
            if args.no_item:
                running += h.detach().abs().mean()
            else:
                watched.append(h.abs().mean().item())  # a sync per layer: the GPU drains
        loss = h.square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print("done", len(watched), float(running))


if __name__ == "__main__":
    main()
