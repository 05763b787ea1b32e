"""The workload's own sitecustomize: must still run under gpudoctor (it marks the environment)."""
import os

os.environ["USER_SITECUSTOMIZE_RAN"] = "yes"
