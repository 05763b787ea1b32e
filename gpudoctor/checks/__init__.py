"""gpudoctor's built-in checks: one module per check, the module docstring is its page.

A check module defines ``CHECK = Check(...)`` (see gpudoctor.model.Check). The
built-ins are registered under the ``gpudoctor.checks`` entry point group like any
third-party check; BUILTIN lets a source checkout find them without metadata.
"""

BUILTIN = [
    "gd001_run_failed",
    "gd101_workers",
    "gd102_input_stall",
    "gd103_cpu_saturation",
    "gd104_storage",
    "gd105_pinned_memory",
    "gd201_gpu_idle",
    "gd202_batch_headroom",
    "gd203_clocks",
    "gd301_launch_bound",
    "gd302_host_sync",
    "gd303_copies",
    "gd304_fp32_matmul",
    "gd305_optimizer_kernels",
    "gd401_fragmentation",
    "gd402_oom",
    "gd501_straggler",
    "gd502_communication",
    "gd503_gpu_imbalance",
    "gd504_rank_starved",
]
