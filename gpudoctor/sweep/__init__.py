"""`gpudoctor sweep`: measure the batch-size curve instead of guessing it (playbook steps 2, 4).

    gpudoctor sweep mymodels.py:build --mode infer --latency-p50-ms 100
    gpudoctor sweep mymodels.py:build --mode train --batch-sizes 8,16,32,64,128

Pipeline, one module per stage:
    target     the user's contract: build(batch_size) -> (model, make_batch) | SweepTarget
    search     which sizes, in what order (doubling, then bisecting the memory edge)
    runner     trial processes: reused far from the memory edge (reuse), fresh near it
    worker     one trial process, many sizes in turn, cleaned up between them
    trial      one size inside it: steps -> measure (stability) -> gpu_sampler
    analysis   knee, memory edge, latency limit, power (pure, tested on synthetic curves)
    recommend  offline and online batch sizes, with their assumptions
    report     the gpudoctor.sweep/1 dict the renderers receive

Importing this package does not import torch.
"""

from __future__ import annotations

from gpudoctor.sweep.target import SweepTarget

__all__ = ["SweepTarget"]
