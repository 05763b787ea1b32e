"""The preflight checklist as one self-contained HTML page, checklist on top.

Same rules as the other pages (reports.html): jinja2 autoescaping, the shared head
(Content-Security-Policy forbidding every network request), inline styles, and
only the hashed copy/print script may run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from gpudoctor.base.text import format_bytes

from ._common import format_number
from .console import printable
from .html import SCRIPT, content_security_policy, environment

STATUS_CLASS = {"pass": "st-pass", "warn": "warning", "fail": "critical", "not-checked": "st-skipped"}
STATUS_LABEL = {"pass": "pass", "warn": "warn", "fail": "fail", "not-checked": "not checked"}
GROUP_TITLES = {"gpu": "Driver and GPUs", "health": "GPU health", "links": "Links and placement",
                "host": "Host", "env": "Environment", "job": "Job (policy)"}


def render(report: Mapping[str, Any]) -> str:
    report = printable(dict(report))  # no terminal controls, even in a page (an env value may hold them)
    counts = report.get("counts") or {}
    items = list(report.get("items") or [])
    groups: list[tuple[str, list[Mapping[str, Any]]]] = []
    for item in items:
        title = GROUP_TITLES.get(str(item.get("group")), str(item.get("group")))
        if not groups or groups[-1][0] != title:
            groups.append((title, []))
        groups[-1][1].append(item)
    host = report.get("host") or {}
    job = report.get("job") or None
    return environment().get_template("preflight.html").render(
        csp=content_security_policy(),
        script=Markup(SCRIPT),
        report=report,
        verdict=report.get("verdict") or "",
        level="critical" if counts.get("fail") else "warning" if counts.get("warn") else "ok",
        counts=counts,
        groups=groups,
        status_class=STATUS_CLASS,
        status_label=STATUS_LABEL,
        host_rows=_host_rows(host, report),
        gpus=host.get("gpus") or [],
        policy=report.get("policy") or {},
        job=job,
        job_rows=_job_rows(job) if job else [],
        bytes=lambda v: format_bytes(v) if isinstance(v, (int, float)) else "not read",
    )


def _host_rows(host: Mapping[str, Any], report: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        ("Host", str(host.get("name") or "not recorded")),
        ("Platform", str(host.get("platform") or "not recorded")),
        ("Python", str(host.get("python") or "not recorded")),
        ("torch", f"{host.get('torch') or 'not importable'}"
         + (f" (CUDA {host['torch_cuda']})" if host.get("torch_cuda") else "")),
        ("Driver", f"{host.get('driver')} (CUDA {host.get('driver_cuda')})" if host.get("driver") else
         f"not read: {host.get('nvml_error') or 'unknown'}"),
        ("Checkpoint directory", str(report.get("checkpoint_dir") or ".")),
        ("Audit time", f"{report.get('created_at')} ({format_number(report.get('duration_s'), 's')})"),
    ]


def _job_rows(job: Mapping[str, Any]) -> list[tuple[str, str]]:
    s = job.get("summary") or {}
    step = s.get("step_time_median_s")
    return [
        ("Exit", (f"{job.get('exit_code')} (stop: {job.get('stop_reason') or 'exited'}; "
                  f"{format_number(job.get('duration_s'), 's')})")),
        ("Steps", f"{s.get('steps') or 0} ({s.get('steady_steps') or 0} steady)"),
        ("Median step time", format_number(step, "s") if step is not None else "not measured"),
        ("Throughput", "not measured" if s.get("steps_per_s") is None else f"{s['steps_per_s']:.3g} steps/s"
         + (f" ({s['samples_per_s']:.4g} samples/s)" if s.get("samples_per_s") is not None else "")),
        ("Data-wait share", format_number(s.get("data_wait_share"), "share")),
        ("GPU utilization (duty cycle)", format_number(s.get("gpu_util_mean"), "%")),
        ("SM activity (GPM)", format_number(s.get("sm_activity_mean"), "%")),
        ("Peak memory allocated", format_number(s.get("peak_memory_allocated_bytes"), "bytes")),
    ]
