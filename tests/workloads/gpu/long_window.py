"""GPU workload: a long torch.profiler window of a launch-bound training loop, exported as
one Chrome trace with ProfilerStep#N ranges (no gpudoctor agent needed).

    python3 tests/workloads/gpu/long_window.py /tmp/long.json 60

Known answer: 60 steps of tiny layers and a per-parameter AdamW (about 800,000 events);
`gpudoctor analyze` finds GD305 and GD301 and replays the last steps that fit its budget
(benchmarks/replay_part.py compares that part with the whole window).
"""

import sys

import torch
from tiny_kernels import build  # this script's folder is on sys.path when it runs
from torch.profiler import ProfilerActivity, profile, schedule


def main() -> None:
    path = sys.argv[1]
    active = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    model, opt, x = build()  # tiny_kernels' model: tiny layers, per-parameter AdamW
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True,
                 schedule=schedule(wait=5, warmup=3, active=active, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(5 + 3 + active + 2):
            loss = model(x).square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()
    torch.cuda.synchronize()
    print("done")


if __name__ == "__main__":
    main()
