"""The preflight catalog: every item's stable ID and slug, why it matters, how to fix it,
and where its threshold comes from. IDs are never reused; ranges follow the groups:
PF1xx driver and GPUs, PF2xx GPU health, PF3xx links and placement, PF4xx host,
PF5xx environment, PF9xx the job (policy thresholds on a bounded diagnose run).
"""

from __future__ import annotations

from gpudoctor.preflight.model import ItemSpec

_SPECS = [
    # ---- driver and GPUs ------------------------------------------------------------
    ItemSpec("PF101", "driver-cuda", "gpu", "The driver supports the CUDA version torch was built for",
             why="torch runs its kernels through the driver. A driver whose CUDA major version is below "
                 "torch's cannot start CUDA: torch sees no GPU and the job fails or runs on the CPU. An "
                 "older minor version of the same major runs (minor-version compatibility) but cannot "
                 "JIT-compile newer PTX.",
             fix="Install a driver whose CUDA version (nvidia-smi's header) is at least torch.version.cuda, "
                 "or the torch build for the driver's CUDA.",
             fix_code="pip install torch --index-url https://download.pytorch.org/whl/cu126"
                      "   # pick the cuXY <= the driver's CUDA",
             source="NVIDIA CUDA Compatibility guide: minor-version compatibility within a major version "
                    "(CUDA 11 and later); nvmlSystemGetCudaDriverVersion gives the driver's CUDA."),
    ItemSpec("PF102", "gpus-visible", "gpu", "Every GPU on the PCI bus is seen by NVML and by torch",
             why="A GPU the driver lost (Xid 79: fallen off the bus) or one torch cannot see leaves a rank "
                 "without a device or runs the job on fewer GPUs than planned.",
             fix="Look for Xid errors in the kernel log, then reset the GPU or drain the node; check "
                 "CUDA_VISIBLE_DEVICES (PF503).",
             fix_code="sudo dmesg | grep -i xid; nvidia-smi -L",
             source="NVIDIA GPU debug guidelines (Xid 79: GPU has fallen off the bus); PCI vendor 0x10de "
                    "display/3D controllers in sysfs vs nvmlDeviceGetCount vs torch.cuda.device_count()."),
    ItemSpec("PF103", "persistence-mode", "gpu", "Persistence mode is on",
             why="Without it the driver tears the GPU state down whenever no client holds it, so every new "
                 "process (each job, each torchrun restart) waits for the driver to initialise the GPUs "
                 "again, seconds on a multi-GPU node, while they sit idle.",
             fix="Run the persistence daemon (or set the legacy persistence mode).",
             fix_code="sudo systemctl enable --now nvidia-persistenced   # or: sudo nvidia-smi -pm 1",
             source="NVIDIA Driver Persistence documentation: nvidia-persistenced is recommended on Linux. "
                    "A warning by default; the policy key require_persistence_mode makes it a failure."),
    ItemSpec("PF104", "mig-mode", "gpu", "MIG is off (the job gets whole GPUs)",
             why="In MIG mode a process sees one GPU instance: a fraction of the SMs, memory and bandwidth. "
                 "A job sized for the whole GPU runs slower, and NVML reports no whole-GPU utilization.",
             fix="If the job needs a whole GPU, disable MIG on it (no process may be using it) or schedule "
                 "the job on a GPU without MIG.",
             fix_code="sudo nvidia-smi -i 0 -mig 0",
             source="NVIDIA Multi-Instance GPU user guide."),
    ItemSpec("PF105", "gpu-processes", "gpu", "No other process holds GPU memory or compute",
             why="Another process on the GPU shares its SMs (time-sliced) and its memory: the job's kernels "
                 "wait their turn and its batch must fit in what is left.",
             fix="Stop or move the other processes (nvidia-smi lists them), or schedule the job on a free GPU.",
             fix_code="nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
             source="nvmlDeviceGetComputeRunningProcesses / GetGraphicsRunningProcesses; memory used "
                    "above 1 GiB or utilization above 0 with no process listed means processes outside "
                    "this PID namespace (another container): gpudoctor's threshold, above the driver's "
                    "own reservation."),
    # ---- GPU health ------------------------------------------------------------------
    ItemSpec("PF201", "ecc-errors", "health", "ECC is on and no uncorrectable ECC error occurred",
             why="An uncorrectable memory error kills the process using that memory (Xid 48/94/95) and "
                 "usually needs a GPU reset; with ECC off, memory errors silently corrupt results.",
             fix="Drain the node and reset the GPU after an uncorrectable error; persistent errors mean an "
                 "RMA. Turn ECC on where it was turned off (takes effect after a reset).",
             fix_code="nvidia-smi -q -d ECC,ROW_REMAPPER",
             source="NVIDIA GPU Memory Error Management documentation; volatile counts are since the "
                    "driver loaded, aggregate counts over the GPU's life."),
    ItemSpec("PF202", "memory-remap", "health", "No pending or failed row remapping (retired pages)",
             why="A pending row remap (or page retirement) takes effect only after a GPU reset; until "
                 "then the bad memory stays in use. A failed remap means the GPU ran out of spare rows.",
             fix="Reset the GPU (or reboot) to apply a pending remap; a remapping failure means an RMA.",
             fix_code="sudo nvidia-smi -i 0 -r",
             source="NVIDIA GPU Memory Error Management (row remapping on A100 and later, "
                    "nvmlDeviceGetRemappedRows; dynamic page retirement before)."),
    ItemSpec("PF203", "clock-events-idle", "health", "No slowdown, thermal or power-brake clock event at idle",
             why="Hardware slowdown, thermal slowdown and the power brake cut the SM clock (HW slowdown "
                 "by half or more) under any load. Active on an idle GPU they point at cooling, power "
                 "supply or a failing board, and the job will run slower from the first step.",
             fix="Check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER); a persistent "
                 "HW slowdown at idle needs the hardware team.",
             fix_code="nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER",
             source="NVML nvmlClocksEventReason* (nvml.h): HwSlowdown, SwThermalSlowdown, "
                    "HwThermalSlowdown, HwPowerBrakeSlowdown fail; SwPowerCap at idle warns."),
    ItemSpec("PF204", "power-limit", "health", "The power limit is the board's default",
             why="A power cap below the board's default lowers the clocks under load (SwPowerCap): a "
                 "heavy training step runs slower on the same GPU.",
             fix="Restore the default limit (unless the site caps power on purpose).",
             fix_code="sudo nvidia-smi -i 0 -pl <default watts>",
             source="nvmlDeviceGetEnforcedPowerLimit vs nvmlDeviceGetPowerManagementDefaultLimit; a "
                    "warning by default, a failure below the policy's min_power_limit_share."),
    ItemSpec("PF205", "application-clocks", "health", "Application clocks are not set below the default",
             why="Application clocks set below the default (nvidia-smi -ac) cap the clocks every kernel "
                 "runs at.",
             fix="Reset the application clocks.",
             fix_code="sudo nvidia-smi -i 0 -rac   # locked clocks (-lgc) are reset with -rgc",
             source="nvmlDeviceGetApplicationsClock vs nvmlDeviceGetDefaultApplicationsClock (SM and memory). "
                    "Locked clocks (nvidia-smi -lgc) have no NVML getter and are not read."),
    # ---- links and placement ----------------------------------------------------------
    ItemSpec("PF301", "pcie-width", "links", "PCIe links run at their full width",
             why="A link trained at x8 instead of x16 halves host-to-device bandwidth: every batch copy "
                 "and checkpoint takes twice as long (a badly seated card or riser).",
             fix="Reseat the card or riser, or move it to a full-width slot.",
             fix_code="nvidia-smi -q -d PCIE   # or: sudo lspci -vv | grep -E 'LnkCap|LnkSta'",
             source="nvmlDeviceGetCurrPcieLinkWidth vs nvmlDeviceGetMaxPcieLinkWidth (the widest the "
                    "card and slot allow)."),
    ItemSpec("PF302", "pcie-generation", "links", "PCIe links run at the generation card and slot allow",
             why="Each PCIe generation doubles the bandwidth: a Gen5 card in a Gen4 slot, or a link "
                 "stuck at Gen1, slows every host-device copy.",
             fix="Use a slot of the card's generation; check BIOS PCIe settings. Links downshift at idle to "
                 "save power, so judge the current generation while the GPU works.",
             fix_code="nvidia-smi -q -d PCIE",
             source="nvmlDeviceGetCurrPcieLinkGeneration vs nvmlDeviceGetMaxPcieLinkGeneration (card and "
                    "system) and nvmlDeviceGetGpuMaxPcieLinkGeneration (card alone)."),
    ItemSpec("PF303", "numa-affinity", "links", "This process may run on the CPUs of each GPU's NUMA node",
             why="Host-device copies and pinned buffers on the other socket cross the inter-socket link: "
                 "slower copies and a DataLoader competing for remote memory bandwidth.",
             fix="Bind each rank to its GPU's NUMA node.",
             fix_code="numactl --cpunodebind=<node> --membind=<node> python train.py",
             source="Linux sysfs: /sys/bus/pci/devices/<bus id>/numa_node and "
                    "/sys/devices/system/node/node<N>/cpulist, against sched_getaffinity."),
    ItemSpec("PF304", "gpu-topology", "links", "GPUs talk over NVLink or a PCIe switch, not across sockets",
             why="Multi-GPU jobs exchange gradients every step. Without NVLink, GPU pairs on different "
                 "CPU sockets pass data through the CPUs' interconnect; an NVLink that is down forces "
                 "NCCL onto slower paths.",
             fix="Place multi-GPU jobs on GPUs under one PCIe switch or socket (nvidia-smi topo -m); report "
                 "inactive NVLinks to the hardware team.",
             fix_code="nvidia-smi topo -m; nvidia-smi nvlink --status",
             source="nvmlDeviceGetTopologyCommonAncestor (SYSTEM = across sockets) and "
                    "nvmlDeviceGetNvLinkState."),
    # ---- host --------------------------------------------------------------------------
    ItemSpec("PF401", "usable-cores", "host", "Enough usable CPU cores per GPU",
             why="DataLoader workers and the Python thread that launches kernels run on the cores this "
                 "process may use (affinity and cgroup quota), not on the machine's: too few and the GPU "
                 "waits for input.",
             fix="Ask the scheduler for more CPUs per GPU (Slurm --cpus-per-gpu, Kubernetes cpu limits, "
                 "docker --cpus), or lower the DataLoader work per sample.",
             source="gpudoctor's minimum: 4 usable cores per GPU (the main thread and 3 DataLoader "
                    "workers); policy key min_cores_per_gpu. PyTorch's DataLoader also warns when "
                    "num_workers exceeds the CPUs in the affinity mask."),
    ItemSpec("PF402", "cpu-governor", "host", "The CPU frequency governor is performance",
             why="The main Python thread launches kernels in short bursts between waits; a governor that "
                 "lets cores drop to low frequencies makes each burst slower to start.",
             fix="Set the performance governor.",
             fix_code="sudo cpupower frequency-set -g performance",
             source="Linux cpufreq documentation (performance holds the highest frequency); GPU server "
                    "tuning guides recommend it. A warning; policy key require_performance_governor."),
    ItemSpec("PF403", "shm-size", "host", "/dev/shm is large enough for DataLoader workers",
             why="DataLoader workers hand batches to the training process through shared memory "
                 "(/dev/shm). A container's 64 MiB default fills up and kills the workers "
                 "(\"Unexpected bus error encountered in worker ... insufficient shared memory\").",
             fix="Give the container more shared memory (or the host's IPC namespace).",
             fix_code="docker run --shm-size=8g ..."
                      "   # or --ipc=host; Kubernetes: an emptyDir with medium: Memory on /dev/shm",
             source="Docker's default --shm-size is 64 MiB (fails); PyTorch's README asks for --ipc=host "
                    "or a larger --shm-size; NVIDIA's container examples use --shm-size=1g (below warns). "
                    "Policy key min_shm_bytes."),
    ItemSpec("PF404", "memlock-limit", "host", "The locked-memory limit does not block RDMA",
             why="NCCL over InfiniBand/RoCE and GPUDirect RDMA register buffers as locked memory; a small "
                 "RLIMIT_MEMLOCK makes registration fail or fall back to slower paths. (CUDA's own pinned "
                 "memory, pin_memory=True, is pinned by the driver and not charged to this limit.)",
             fix="Raise the limit to unlimited for the job.",
             fix_code="docker run --ulimit memlock=-1 ..."
                      "   # or: ulimit -l unlimited (limits.conf: * - memlock unlimited)",
             source="NVIDIA's container examples run with --ulimit memlock=-1; RDMA devices are read "
                    "from /sys/class/infiniband. Policy key min_memlock_bytes."),
    ItemSpec("PF405", "open-files-limit", "host", "The open-files limit is above the Linux default",
             why="With torch's default file_descriptor sharing strategy, every tensor a DataLoader worker "
                 "sends holds a file descriptor until received; at the common soft limit of 1024, jobs "
                 "with several workers fail with \"Too many open files\".",
             fix="Raise the soft limit (up to the hard limit) before the job starts, or switch torch to "
                 "the file_system sharing strategy.",
             fix_code="ulimit -n 65536   # or in code: torch.multiprocessing.set_sharing_strategy('file_system')",
             source="PyTorch multiprocessing docs (sharing strategies: raise the limit or use file_system); "
                    "the Linux default soft limit is 1024. gpudoctor asks for 4096; policy key "
                    "min_open_files."),
    ItemSpec("PF406", "swap-in-use", "host", "Little or no swap in use",
             why="Swap in use means host memory ran short: pages of the training process or its "
                 "DataLoader workers come back from disk at millisecond cost, stalling the input "
                 "pipeline while the GPU waits.",
             fix="Find what uses the memory (fewer or lighter workers, smaller prefetch_factor) or give "
                 "the job more RAM; swapoff -a && swapon -a brings swapped pages back once memory is free.",
             source="gpudoctor's threshold: 1 GiB of swap in use warns (a few MiB of idle pages are "
                    "normal); policy key max_swap_used_bytes."),
    ItemSpec("PF407", "checkpoint-disk", "host", "Free disk where checkpoints go",
             why="A checkpoint that cannot be written crashes the job at the end of an epoch; a nearly "
                 "full disk also slows writes while the GPUs wait for the save.",
             fix="Free space or point checkpoints elsewhere (--checkpoint-dir tells preflight where).",
             source="gpudoctor's defaults: below 1 GiB fails, below 10 GiB or 5% of the filesystem warns "
                    "(AdamW training saves about 16 bytes per parameter: 16 GB for 1B parameters). "
                    "Policy key min_free_disk_bytes."),
    # ---- environment -------------------------------------------------------------------
    ItemSpec("PF501", "cuda-launch-blocking", "env", "CUDA_LAUNCH_BLOCKING is not set to 1",
             why="CUDA_LAUNCH_BLOCKING=1 makes every kernel launch wait until the kernel finished: the "
                 "CPU can no longer queue work ahead and the GPU idles between kernels.",
             fix="Unset it outside debugging sessions.",
             fix_code="unset CUDA_LAUNCH_BLOCKING",
             source="PyTorch CUDA semantics docs: asynchronous execution; CUDA_LAUNCH_BLOCKING=1 is for "
                    "debugging."),
    ItemSpec("PF502", "alloc-conf", "env", "The caching allocator settings are valid and not debugging ones",
             why="PYTORCH_NO_CUDA_MEMORY_CACHING=1 turns every allocation into cudaMalloc/cudaFree, which "
                 "synchronise the GPU; a malformed PYTORCH_CUDA_ALLOC_CONF makes torch fail at its "
                 "first CUDA allocation.",
             fix="Unset PYTORCH_NO_CUDA_MEMORY_CACHING; fix or remove the offending PYTORCH_CUDA_ALLOC_CONF "
                 "entry (expandable_segments:True is the usual remedy for fragmentation).",
             fix_code="export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
             source="PyTorch CUDA semantics docs (memory management, optimizing memory usage with "
                    "PYTORCH_CUDA_ALLOC_CONF); torch rejects max_split_size_mb <= 20 and "
                    "garbage_collection_threshold outside (0, 1)."),
    ItemSpec("PF503", "cuda-visible-devices", "env", "CUDA_VISIBLE_DEVICES names GPUs that exist",
             why="CUDA_VISIBLE_DEVICES decides which GPUs the job sees. An empty value hides them all; "
                 "CUDA ignores everything from the first entry it cannot resolve, so a typo silently "
                 "drops GPUs.",
             fix="Set it to indices or UUIDs that nvidia-smi -L lists (or leave it to the scheduler).",
             fix_code="nvidia-smi -L",
             source="CUDA C Programming Guide, CUDA environment variables."),
    ItemSpec("PF504", "nccl-settings", "env", "No NCCL or torch.distributed debugging settings",
             why="Debug and fallback settings cost every collective: NCCL_P2P_DISABLE and NCCL_SHM_DISABLE "
                 "route GPU-to-GPU traffic through host memory, NCCL_IB_DISABLE sends inter-node traffic "
                 "over TCP sockets, blocking waits stall the host thread on each collective, and "
                 "NCCL_DEBUG=INFO/TRACE or TORCH_DISTRIBUTED_DEBUG=DETAIL add logging and checks.",
             fix="Unset the variables outside debugging sessions.",
             source="NCCL environment variables documentation; PyTorch torch.distributed docs "
                    "(TORCH_NCCL_BLOCKING_WAIT, TORCH_DISTRIBUTED_DEBUG)."),
    ItemSpec("PF505", "torch-cuda-build", "env", "torch is built with CUDA where NVIDIA GPUs exist",
             why="A CPU-only torch wheel (torch.version.cuda is None) runs everything on the CPU: the "
                 "GPUs stay at 0%.",
             fix="Install the CUDA build of torch.",
             fix_code="pip install torch --index-url https://download.pytorch.org/whl/cu126",
             source="torch.version.cuda (None in CPU-only builds)."),
    # ---- the job (policy thresholds) ----------------------------------------------------
    ItemSpec("PF901", "job-exit", "job", "The job ran without failing",
             why="A job that crashes in its first steps (OOM, a missing file, a CUDA error) never uses the GPU.",
             fix="Read the job's report (GD001 names the crash).",
             source="The workload's exit status; stopping it after --steps or --duration counts as success."),
    ItemSpec("PF902", "min-sm-activity", "job", "SM activity reaches the policy's minimum",
             why="SM activity (GPM) is the share of time the SMs really work, unlike the duty cycle.",
             fix="Follow the job report's findings, input pipeline first.",
             source="Policy key min_sm_activity (percent)."),
    ItemSpec("PF903", "min-gpu-utilization", "job", "GPU utilization (duty cycle) reaches the policy's minimum",
             why="The duty cycle is the share of time any kernel ran; low means the GPU waited.",
             fix="Follow the job report's findings.", source="Policy key min_gpu_utilization (percent)."),
    ItemSpec("PF904", "max-data-wait-share", "job", "The loop waits for data at most the policy's share",
             why="Time spent waiting for the next batch is time the GPU idles.",
             fix="More DataLoader workers, cheaper preprocessing (GD101, GD102).",
             source="Policy key max_data_wait_share (a fraction); TensorBoard's profiler flags 5%."),
    ItemSpec("PF905", "no-critical-findings", "job", "The diagnosis has no critical finding",
             why="A critical finding is a bottleneck that costs a large share of the GPU's time.",
             fix="Apply the remedies of the job report's critical findings.",
             source="Policy key no_critical_findings."),
    ItemSpec("PF906", "min-samples-per-s", "job", "Throughput reaches the policy's samples/s",
             why="The throughput floor the job was sized for.", fix="Follow the job report's findings.",
             source="Policy key min_samples_per_s (steps/s x the DataLoader's batch size)."),
    ItemSpec("PF907", "min-steps-per-s", "job", "Throughput reaches the policy's steps/s",
             why="The throughput floor the job was sized for.", fix="Follow the job report's findings.",
             source="Policy key min_steps_per_s."),
    ItemSpec("PF908", "max-step-time", "job", "The median step time is within the policy's limit",
             why="The step-time budget the job was sized for.", fix="Follow the job report's findings.",
             source="Policy key max_step_time_ms (median over steady steps)."),
    ItemSpec("PF909", "max-peak-memory-share", "job", "Peak GPU memory stays below the policy's share",
             why="A job near the memory edge runs out of memory on a longer sequence or a bigger batch, "
                 "and the allocator retries (GD401) before that.",
             fix="Smaller batch, activation checkpointing, or expandable_segments:True.",
             source="Policy key max_peak_memory_share (torch.cuda.max_memory_allocated / GPU memory); "
                    "the diagnosis flags 90%."),
]

SPECS: dict[str, ItemSpec] = {spec.id: spec for spec in _SPECS}
BY_SLUG: dict[str, ItemSpec] = {spec.slug: spec for spec in _SPECS}


def find(name: str) -> ItemSpec | None:
    """An item by ID (PF403, any case) or slug (shm-size)."""
    key = name.strip()
    return SPECS.get(key.upper()) or BY_SLUG.get(key.lower())
