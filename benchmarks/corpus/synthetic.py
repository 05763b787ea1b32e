"""Synthetic workloads of the accuracy corpus: one known cause each, and the flags that remedy it by hand.

    python synthetic.py loader  [--workers N] [--item-us US] [--batch B]     GD101/GD102/GD103
    python synthetic.py storage [--workers N] [--batch B]                    GD104 (reads wait on the disk)
    python synthetic.py copies  (--mb MB [--pinned] | --tiny N [--stacked])  GD105/GD303
    python synthetic.py mlp     [--batch B] [--width W] [--layers L] [--infer] [--compile MODE]
                                [--optimizer sgd|adamw-forloop|adamw-fused] [--items N] [--memory-fraction F]
                                                                             GD201/GD202/GD301/GD302/GD402
    python synthetic.py matmul  [--size N] [--dtype fp32|tf32|bf16] [--fused] [--compile MODE]
                                                                             GD304/GD203/GD306

Every subcommand takes ``--steps`` and ``--device`` (``cpu`` for the CPU smoke test). Data are
generated; nothing is downloaded. A step is an optimizer step, or with ``--infer`` a forward.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset


class BusyItems(Dataset):
    """Each item costs ITEM_US of CPU in whoever produces it (a worker, or the main process)."""

    def __init__(self, width: int, item_us: float) -> None:
        self.width, self.item_s = width, item_us / 1e6

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> torch.Tensor:
        end = time.thread_time() + self.item_s
        while time.thread_time() < end:  # CPU work standing in for decode and augmentation
            pass
        return torch.full((self.width,), float(index % 7))


class FileItems(Dataset):
    """Each item read from its own file, the page cache dropped before the read: the wait is on storage."""

    def __init__(self, folder: str, count: int, item_bytes: int) -> None:
        self.paths = []
        for i in range(count):
            path = os.path.join(folder, f"item{i}.bin")
            with open(path, "wb") as fh:
                fh.write(os.urandom(item_bytes))
            self.paths.append(path)

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> torch.Tensor:
        path = self.paths[index % len(self.paths)]
        fd = os.open(path, os.O_RDONLY)
        try:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            data = os.read(fd, 1 << 24)
        finally:
            os.close(fd)
        return torch.frombuffer(bytearray(data[:4096]), dtype=torch.uint8).float()


def _model(width: int, layers: int, out: int, device: torch.device) -> torch.nn.Module:
    body: list[torch.nn.Module] = []
    for _ in range(layers):
        body += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*body, torch.nn.Linear(width, out)).to(device)


def _train_on_loader(loader: DataLoader, width: int, steps: int, device: torch.device) -> None:
    model = _model(width, 2, 1, device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    for step, batch in enumerate(loader):
        if step >= steps:
            break
        loss = model(batch.to(device, non_blocking=True)).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def loader(args: argparse.Namespace, device: torch.device) -> None:
    data = BusyItems(256, args.item_us)
    _train_on_loader(DataLoader(data, batch_size=args.batch, num_workers=args.workers, pin_memory=device.type == "cuda",
                                persistent_workers=args.workers > 0, prefetch_factor=4 if args.workers else None),
                     256, args.steps, device)


def storage(args: argparse.Namespace, device: torch.device) -> None:
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        data = FileItems(folder, 2048, 256 * 1024)
        _train_on_loader(DataLoader(data, batch_size=args.batch, num_workers=args.workers,
                                    persistent_workers=args.workers > 0,
                                    prefetch_factor=4 if args.workers else None), 4096, args.steps, device)


def copies(args: argparse.Namespace, device: torch.device) -> None:
    if args.tiny:
        width = 64
        host = [torch.randn(width) for _ in range(args.tiny)]
    else:
        width = 4096
        rows = args.mb * (1 << 20) // (4 * width)
        host = [torch.randn(rows, width) for _ in range(2)]
        if args.pinned:
            host = [t.pin_memory() for t in host]
    model = torch.nn.Linear(width, 256).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    for step in range(args.steps):
        if args.tiny and args.stacked:
            x = torch.stack(host).to(device)  # one copy of everything
        elif args.tiny:
            x = torch.stack([t.to(device) for t in host])  # one copy per tensor
        else:
            x = host[step % 2].to(device, non_blocking=args.pinned)
        loss = model(x).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def _optimizer(name: str, params: list[torch.nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4)
    if name == "adamw-forloop":
        return torch.optim.AdamW(params, lr=1e-4, foreach=False)
    return torch.optim.AdamW(params, lr=1e-4, fused=device.type == "cuda")


def mlp(args: argparse.Namespace, device: torch.device) -> None:
    if args.memory_fraction and device.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(args.memory_fraction)
    model = _model(args.width, args.layers, 10, device)
    params = list(model.parameters())
    run = torch.compile(model, mode=args.compile) if args.compile else model
    x = torch.randn(args.batch, args.width, device=device)
    if args.infer:
        model.eval()
        with torch.inference_mode():
            for _ in range(args.steps):
                run(x)
        return
    opt = _optimizer(args.optimizer, params, device)
    for _ in range(args.steps):
        out = run(x)
        loss = out.square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        for i in range(args.items):  # logging that waits for the GPU, several times a step
            float(out[i % out.shape[0], 0].item())


def matmul(args: argparse.Namespace, device: torch.device) -> None:
    # fp32: PyTorch's default "highest" precision; tf32: the remedy GD304 names (TF32 tensor cores)
    torch.set_float32_matmul_precision("high" if args.dtype == "tf32" else "highest")
    model = _model(args.size, 1, args.size, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.fused and device.type == "cuda")
    run = torch.compile(model, mode=args.compile) if args.compile else model
    x = torch.randn(args.size, args.size, device=device)
    for _ in range(args.steps):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = run(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--steps", type=int, default=100000)
    common.add_argument("--device", default="cuda")
    p = sub.add_parser("loader", parents=[common])
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--item-us", type=float, default=300.0)
    p.add_argument("--batch", type=int, default=64)
    p = sub.add_parser("storage", parents=[common])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--folder", default=None, help="where the item files go (default: the temp folder)")
    p = sub.add_parser("copies", parents=[common])
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--pinned", action="store_true")
    p.add_argument("--tiny", type=int, default=0)
    p.add_argument("--stacked", action="store_true")
    p = sub.add_parser("mlp", parents=[common])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--infer", action="store_true")
    p.add_argument("--compile", default=None, help="torch.compile mode (default, reduce-overhead, ...)")
    p.add_argument("--optimizer", choices=("sgd", "adamw-forloop", "adamw-fused"), default="sgd")
    p.add_argument("--items", type=int, default=0, help=".item() calls per step")
    p.add_argument("--memory-fraction", type=float, default=0.0)
    p = sub.add_parser("matmul", parents=[common])
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--dtype", choices=("fp32", "tf32", "bf16"), default="fp32")
    p.add_argument("--fused", action="store_true")
    p.add_argument("--compile", default=None, help="torch.compile mode of the model (default, ...)")
    return parser.parse_args()


def main() -> None:
    args = parse()
    device = torch.device(args.device)
    {"loader": loader, "storage": storage, "copies": copies, "mlp": mlp, "matmul": matmul}[args.kind](args, device)
    if device.type == "cuda":
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
