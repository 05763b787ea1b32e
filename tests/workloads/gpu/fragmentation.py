"""GPU workload: allocations of varying sizes with interleaved lifetimes, under a memory cap.

Known answer: GD401 (allocation retries, fragmentation). The cap
(set_per_process_memory_fraction(0.05)) makes a 141 GB GPU behave like a ~7 GB one.
Each step keeps a few tensors of random size (64 MiB to 1.5 GiB) alive and frees a
random one, the way variable-length batches without bucketing do; the cached
segments split into pieces that later, larger requests do not fit, so the allocator
must free its cache and retry. TF32 is on so that the matmuls are not a second problem.

On an H200 the cap is too tight for the tensors kept at the worst step: the run ends out of
memory (the recorded fixture: GD402 with GD401 beside it), with expandable segments too (5.6 GiB
allocated when a request over 1.4 GiB failed). ``--cap-gib G`` caps it at G GiB instead, on any
GPU: the accuracy corpus uses 10 (room for the largest live set, not for the fragments), so the
allocator still retries but the run ends, and expandable segments can show what they buy.
"""

import argparse
import random

import torch

STEPS = 150
LIVE = 6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cap-gib", type=float, help="cap the process at this many GiB (default: 5%% of the GPU)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gib * 2**30 / total) if args.cap_gib else 0.05)
    device = torch.device("cuda")
    rng = random.Random(0)
    model = torch.nn.Linear(1024, 1024).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    kept = []
    for _ in range(STEPS):
        rows = rng.choice([1, 3, 7, 13, 29, 61]) * 1024  # activations of varying sequence length
        x = torch.randn(rows, 1024, device=device)
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        kept.append(torch.empty(rng.randint(64, 1536) * 2**20, dtype=torch.uint8, device=device))
        if len(kept) > LIVE:
            kept.pop(rng.randrange(len(kept)))
    torch.cuda.synchronize()
    print("done", torch.cuda.memory_stats().get("num_alloc_retries"))


if __name__ == "__main__":
    main()
