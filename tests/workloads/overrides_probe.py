"""Workload: prints what it sees of every setting `diagnose --try` can override.

Its own choices are the ones the remedies undo: num_workers=0, pin_memory=False,
TF32 off (allow_tf32 = False, set after import, so a remedy must hold against it),
cudnn.benchmark = False. A parameterless module runs before the model, the way a
transform would: the compile remedy must pass it over. The last stdout line is
``PROBE {json}``.
"""

import argparse
import json
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def _compiled(module):
    return getattr(module, "_compiled_call_impl", None) is not None or "forward" in vars(module)


def _graphs():
    dynamo = sys.modules.get("torch._dynamo.utils")
    return dynamo.counters["stats"]["unique_graphs"] if dynamo is not None else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    data = TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
    loader = DataLoader(data, batch_size=8, num_workers=0)
    transform = torch.nn.Identity()
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while step < args.steps:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(transform(x)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
    seen = {
        "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
        "prefetch_factor": loader.prefetch_factor,
        "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "model_compiled": _compiled(model),
        "transform_compiled": _compiled(transform),
        "graphs_compiled": _graphs(),
    }
    print("PROBE " + json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
