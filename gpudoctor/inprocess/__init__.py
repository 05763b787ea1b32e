"""gpudoctor inside the user's own process: `watch()`, `diagnose_fn()`, the callbacks, notebooks.

    watch.py     the public API: Watch (a context manager), watch(), diagnose_fn()
    agent.py     the agent's torch hooks and profiler window, installed for one watch
    patches.py   what those hooks change in torch, snapshotted and put back afterwards
    recorder.py  the samplers (psutil, NVML, storage) and the Session they make
    progress.py  the line shown while watching (Jupyter or a terminal)
    result.py    Report: the JSON report as a typed mapping that displays itself in Jupyter
"""
