"""A tiny DDP training loop on CPU (gloo) for the multi-rank tests.

Run with ``python -m torch.distributed.run --standalone --nproc-per-node N ddp_ranks.py``,
or ``python ddp_ranks.py --spawn N`` (torch.multiprocessing.spawn, no launcher's RANK).
Options (environment, so the launcher's command line stays plain):
    DDP_STEPS        steps per rank (default 40)
    DDP_SLOW_RANK    this rank is slowed (default: none)
    DDP_SLOW_KIND    "compute": it sleeps in its step; "data": its dataset sleeps per sample
    DDP_SLOW_S       seconds added per step (default 0.03)
"""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

STEPS = int(os.environ.get("DDP_STEPS", "40"))
SLOW_RANK = int(os.environ.get("DDP_SLOW_RANK", "-1"))
SLOW_KIND = os.environ.get("DDP_SLOW_KIND", "compute")
SLOW_S = float(os.environ.get("DDP_SLOW_S", "0.03"))
BATCH = 8


class Samples(Dataset):
    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __len__(self) -> int:
        return STEPS * BATCH

    def __getitem__(self, i: int):
        if self.delay:
            time.sleep(self.delay)
        return torch.full((32,), float(i % 7)), torch.tensor(float(i % 3))


def main(spawned_rank: int | None = None, world_size: int | None = None) -> None:
    if spawned_rank is None:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['DDP_PORT']}",
                                rank=spawned_rank, world_size=world_size)
    rank = dist.get_rank()
    torch.manual_seed(0)
    slow = rank == SLOW_RANK
    data_delay = SLOW_S / BATCH if slow and SLOW_KIND == "data" else 0.0
    loader = DataLoader(Samples(data_delay), batch_size=BATCH, num_workers=0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                                        torch.nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        if slow and SLOW_KIND == "compute":
            time.sleep(SLOW_S)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        loss.backward()
        optimizer.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--spawn":
        import socket

        import torch.multiprocessing as mp

        with socket.socket() as probe:  # a free port for the group's rendezvous
            probe.bind(("127.0.0.1", 0))
            os.environ["DDP_PORT"] = str(probe.getsockname()[1])
        mp.spawn(main, args=(int(sys.argv[2]),), nprocs=int(sys.argv[2]))
    else:
        main()
