"""Replay of a profiled window: predict what a step would cost if a cause vanished.

A torch.profiler window records, per host thread, what the CPU did (Python,
operator dispatch, launch calls, blocking calls, DataLoader waits) and, per GPU
stream, what the GPU did (kernels, copies, memsets), linked by correlation id.
`timeline.build` turns that into a dependency model: host items in order on
their thread, GPU operations in order on their stream, each GPU operation ready
a measured latency after its launch, and blocking calls that wait for the GPU
work they were measured waiting for. `simulate.run` replays that model;
`scenarios.replay` edits it once per cause (data waits removed, syncs that no
longer block, launch cost of a graph-captured chain, pinned asynchronous copies,
fp32 GEMMs at the tensor-core rate) and re-simulates. The ratio of the step time
replayed as measured to the step time replayed without the cause is that
cause's predicted gain. The method follows Daydream (Zhu et al., USENIX ATC
2020); the model and code are gpudoctor's own.
"""

from gpudoctor.replay.scenarios import SCENARIOS, Scenario, register, replay_or_error, replay_trace

__all__ = ["SCENARIOS", "Scenario", "register", "replay_or_error", "replay_trace"]
