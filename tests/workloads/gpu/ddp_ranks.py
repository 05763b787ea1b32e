"""GPU workload: DDP over NCCL, one rank per GPU, optionally one rank slowed.

One GPU (the one-GPU test):
    gpudoctor diagnose -- torchrun --standalone --nproc-per-node 1 tests/workloads/gpu/ddp_ranks.py
Two GPUs, rank 1 slowed by 20 ms per step (commit the Session as a fixture):
    DDP_SLOW_RANK=1 gpudoctor diagnose --out tests/fixtures/h200x2/ddp_straggler \\
        -- torchrun --standalone --nproc-per-node 2 tests/workloads/gpu/ddp_ranks.py
Healthy two-GPU run: the same without DDP_SLOW_RANK.
Two ranks on one GPU (DDP_BACKEND=gloo DDP_SHARE_GPU=1): the overhead benchmark's DDP case.
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS = int(os.environ.get("DDP_STEPS", "200"))
SLOW_RANK = int(os.environ.get("DDP_SLOW_RANK", "-1"))
SLOW_S = float(os.environ.get("DDP_SLOW_S", "0.02"))


def main():
    dist.init_process_group(os.environ.get("DDP_BACKEND", "nccl"))
    rank = dist.get_rank()
    local_rank = 0 if os.environ.get("DDP_SHARE_GPU") else int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)).to(device),
        device_ids=[local_rank] if dist.get_backend() == "nccl" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(STEPS):
        if rank == SLOW_RANK:
            time.sleep(SLOW_S)
        x = torch.randn(2048, 4096, device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
