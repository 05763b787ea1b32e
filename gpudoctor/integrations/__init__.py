"""Callbacks for the training frameworks users already work in.

    gpudoctor.integrations.lightning.GpuDoctorCallback            (lightning.pytorch)
    gpudoctor.integrations.pytorch_lightning.GpuDoctorCallback    (the pytorch_lightning package)
    gpudoctor.integrations.hf.GpuDoctorCallback                   (transformers.Trainer)

Each marks a step per training batch (Lightning) or optimizer step (Trainer), starts a
watch (gpudoctor.watch) when training starts, so the profiler window opens after the
warm-up steps of training itself (not the sanity-check validation), and writes the
report when training ends (or fails). docs/integrations.md has an example for each.
"""
