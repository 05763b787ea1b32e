"""GPU workload: allocations of varying sizes with interleaved lifetimes, under a memory cap.

Known answer: GD401 (inactive split memory / allocation retries). The cap
(set_per_process_memory_fraction) makes a 141 GB GPU behave like a ~7 GB one, so the
allocator must retry (free cached blocks) to satisfy requests.
"""

import random

import torch

STEPS = 150


def main():
    torch.cuda.set_per_process_memory_fraction(0.05)
    device = torch.device("cuda")
    rng = random.Random(0)
    model = torch.nn.Linear(1024, 1024).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    kept = []
    for step in range(STEPS):
        # activations of varying sequence length, as in NLP batches without bucketing
        rows = rng.choice([1, 3, 7, 13, 29, 61, 127]) * 1024
        x = torch.randn(rows, 1024, device=device)
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        kept.append(torch.empty(rng.randint(1, 400) * 2**20, dtype=torch.uint8, device=device))
        if len(kept) > 8:
            kept.pop(rng.randrange(len(kept)))
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
