"""Running and watching a workload, and assembling its Session.

The supervisor starts the command with the agent on its path, samples it (psutil, NVML
through `gpu_monitor`), watches its process tree and its signals, and `assemble` joins the
samples and the agents' events into a Session. `attacher` samples a running process from
outside instead (`gpudoctor attach`); `status` is gpudoctor's own lines while it runs;
`forking` and `analyze_helper` run a long `gpudoctor analyze`'s second process.
"""
