"""Formatting shared by the renderers: numbers with units, severities, the command line.

Everything here reads the finished, typed report only (gpudoctor.verdict.report_model.Report), so
each renderer stays a thin layout over the same words and numbers.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from gpudoctor.agent.redact import redact_argv
from gpudoctor.base.jsonmodel import is_real
from gpudoctor.base.text import format_bytes, format_duration
from gpudoctor.model import STAGES, severity_rank
from gpudoctor.reports.console import printable
from gpudoctor.verdict.report_model import CheckRecord, Report, ReportFinding, as_report

__all__ = ["as_report", "severity_rank"]  # re-exported for the renderers

SEVERITY_LABEL = {"critical": "CRITICAL", "warning": "WARNING", "info": "info"}
STATUS_LABEL = {"pass": "pass", "finding": "finding", "skipped": "skipped", "error": "error"}
# share-like units: a value in [0, 1] printed as a percentage
_SHARE_UNITS = {"share", "fraction", "ratio"}
_BYTE_UNITS = {"bytes", "byte", "b"}
_SECOND_UNITS = {"s", "sec", "seconds"}


def printable_report(report: Report | Mapping[str, Any]) -> Report:
    """The report with every string from the run shown with its control characters escaped."""
    return Report.from_dict(printable(as_report(report).to_dict()))


def fails(finding: ReportFinding, fail_on: str | None) -> bool:
    """True when the finding is at or above the --fail-on level."""
    if not fail_on:
        return False
    return severity_rank(finding.severity) >= severity_rank(fail_on)


def stage_name(stage: Any) -> str:
    return STAGES.get(stage, "other") if isinstance(stage, int) else "other"


def command_line(report: Report) -> str:
    """The workload's command as one shell-quoted line, secrets masked (again: reports
    are attached to tickets, and masking twice is harmless)."""
    return argv_line(report.command)


def argv_line(argv: Any) -> str:
    """An argv (from any document: a sweep's, a diff's) as one shell-quoted line, masked."""
    if not isinstance(argv, list):
        return ""
    return shlex.join(redact_argv([str(a) for a in argv]))


def stopped_as_asked(report: Report) -> bool:
    """gpudoctor stopped the run (--steps, --duration) and it ended on that SIGINT: its 130
    is the stop, not a failure, and headers do not show it as an exit code."""
    return report.stop_reason in ("steps", "duration") and report.exit_code == 130


def exit_code_text(report: Report) -> str:
    """The workload's exit code for a table: "130 (the --steps stop gpudoctor asked for)"."""
    if report.exit_code is None:
        return "unknown"
    if stopped_as_asked(report):
        return f"{report.exit_code} (SIGINT: the --{report.stop_reason} stop gpudoctor asked for, not a failure)"
    return str(report.exit_code)


def format_number(value: Any, unit: str | None = None) -> str:
    """A measured value for humans; None means "not measured", never zero."""
    if value is None:
        return "not measured"
    norm = (unit or "").strip().lower()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if norm in _SHARE_UNITS:
            return f"{value:.0%}" if abs(value) >= 0.01 or value == 0 else f"{value:.1%}"
        if norm == "%":
            return f"{value:.0f}%" if abs(value) >= 1 or value == 0 else f"{value:.2f}%"
        if norm in _BYTE_UNITS:
            return format_bytes(float(value))
        if norm in _SECOND_UNITS:
            return format_duration(float(value))
        if norm in ("us", "µs"):
            return format_duration(float(value) / 1e6)
        if norm == "ms":
            return format_duration(float(value) / 1e3)
        text = f"{value:,}" if isinstance(value, int) else _significant(float(value))
        return f"{text} {unit}" if unit else text
    if isinstance(value, (list, dict)):
        text = json.dumps(value, separators=(", ", ": "), default=str)
    else:
        text = str(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} {unit}" if unit else text


def _significant(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.3g}"


def evidence_items(finding: ReportFinding) -> list[tuple[str, str, str | None]]:
    """(label, formatted value, window) for each evidence entry, in the check's order."""
    return [(entry.label or key.replace("_", " "), format_number(entry.value, entry.unit), entry.window)
            for key, entry in finding.evidence.items()]


def key_numbers(finding: ReportFinding, limit: int = 3) -> str:
    return "; ".join(f"{label} {value}" for label, value, _ in evidence_items(finding)[:limit])


def gain_text(gain: float | None) -> str:
    """A predicted speed-up: '1.9x'; 'n/a' when there is none."""
    if gain is None or not is_real(gain):
        return "n/a"
    return f"{gain:.2f}x" if gain < 1.1 else f"{gain:.1f}x"


def prediction_text(finding: ReportFinding) -> str | None:
    """'step 15.2 ms now, 15.0 ms predicted if batches arrived instantly (replay)', or None."""
    prediction = finding.prediction
    if prediction is None:
        return None
    label = prediction.label or "without this cause"
    method = prediction.method or ""
    now, after, gain = prediction.step_time_s, prediction.predicted_step_time_s, prediction.gain
    if now is not None and after is not None:
        text = f"step {format_duration(now)} now, {format_duration(after)} predicted {label}"
    elif gain is not None:
        text = f"{gain:.2f}x predicted {label}"
    else:
        return None
    return text + (f" ({method})" if method else "")


def prediction_headline(finding: ReportFinding) -> str | None:
    """'now 115.0 ms -> predicted 71.0 ms (1.6x) -> measured 1.76x' (the measured part once a
    --try trial measured it), or None without a prediction."""
    prediction = finding.prediction
    if prediction is None or prediction.gain is None:
        return None
    now, after = prediction.step_time_s, prediction.predicted_step_time_s
    if now is not None and after is not None:
        text = f"now {format_duration(now)} -> predicted {format_duration(after)} ({gain_text(prediction.gain)})"
    else:
        text = f"predicted {gain_text(prediction.gain)} {prediction.label or ''}".rstrip()
    trial = finding.trial if isinstance(finding.trial, Mapping) else {}
    measured = trial.get("measured_gain")
    if is_real(measured):
        text += f" -> measured {measured:.2f}x"
    return text


def prediction_steps(finding: ReportFinding) -> list[str]:
    """How the prediction was obtained, as a short list: the method and what it assumed, then
    the detail's parts (its top-level '; '-separated clauses)."""
    prediction = finding.prediction
    if prediction is None:
        return []
    steps = [f"{prediction.method or 'estimate'}: {prediction.label or 'without this cause'}"]
    detail, depth, start = prediction.detail or "", 0, 0
    for i, char in enumerate(detail):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and detail.startswith("; ", i):
            steps.append(detail[start:i])
            start = i + 2
    steps.append(detail[start:])
    return [step.strip() for step in steps if step.strip()]


def top_remedies(report: Report, limit: int = 3) -> list[ReportFinding]:
    """The findings whose remedies are worth showing first: root causes, not notes."""
    picked = [f for f in report.root_causes() if f.remedy is not None and f.severity != "info"]
    return picked[:limit]


def skipped_checks(report: Report) -> list[CheckRecord]:
    return [c for c in report.checks if c.status in ("skipped", "error")]


# The environment is the Session's own section (gpudoctor.session/1), free JSON in the report.
def gpu_names(report: Report) -> list[str]:
    gpus = report.environment.get("gpus") or []
    return [str(g.get("name") or "unknown GPU") for g in gpus if isinstance(g, Mapping)]


def environment_rows(report: Report) -> list[tuple[str, str]]:
    """The environment as (name, value) rows; "not recorded" rather than blanks."""
    env = report.environment
    cpu = env.get("cpu") or {}
    gpus = env.get("gpus") or []
    gpu_text = ", ".join(
        f"{g.get('name') or 'unknown'}"
        + (f" ({format_bytes(g['memory_total_bytes'])})" if g.get("memory_total_bytes") else "")
        for g in gpus
        if isinstance(g, Mapping)
    )
    cores = report.summary.usable_cores or cpu.get("usable_cores")
    rows = [
        ("GPU", gpu_text or "none recorded"),
        ("Driver", env.get("driver") or "not recorded"),
        ("torch", env.get("torch") or "not recorded"),
        ("CUDA (torch build)", env.get("cuda") or "not recorded"),
        ("CPU", cpu.get("model") or "not recorded"),
        ("Logical cores", _or(cpu.get("logical_cores"))),
        ("Usable cores (affinity, cgroup)", _or(cores)),
        ("Host memory",
         format_bytes(env["host_memory_total_bytes"]) if env.get("host_memory_total_bytes") else "not recorded"),
        ("Python", env.get("python") or "not recorded"),
        ("Platform", env.get("platform") or "not recorded"),
    ]
    return rows


def _or(value: Any) -> str:
    if value is None:
        return "not recorded"
    return _significant(float(value)) if isinstance(value, float) else str(value)


def summary_rows(report: Report) -> list[tuple[str, str]]:
    """The headline numbers of the run, formatted; unmeasured ones say so."""
    s = report.summary
    step_time = s.step_time_median_s
    return [
        ("Steps", f"{s.steps:,}" + (f" ({s.step_source})" if s.step_source else "")),
        ("Median step time", format_duration(step_time) if step_time is not None else "not measured"),
        ("Throughput", _rate(s.steps_per_s, "steps/s") + _samples(s.samples_per_s)),
        ("Data-wait share", format_number(s.data_wait_share, "share")),
        ("GPU utilization (duty cycle)", format_number(s.gpu_util_mean, "%")),
        ("SM activity (real)", format_number(s.sm_activity_mean, "%")),
        ("Tensor-core activity", format_number(s.tensor_activity_mean, "%")),
        ("CPU (usable cores)", format_number(s.cpu_percent_mean, "%")),
        ("Mean power", format_number(s.power_w_mean, "W")),
        ("Peak memory allocated", format_number(s.peak_memory_allocated_bytes, "bytes")),
        ("Profiler windows (gpudoctor's cost)", overhead_text(s.profiler_overhead)),
    ]


# a pause of the loop at a window worth naming: the stop of a small window takes 0.1-0.5 s, its start milliseconds
PAUSE_NAMED_S = 1.0


def overhead_text(overhead: Mapping[str, Any] | None) -> str:
    """What the profiler windows cost: their steps' rate against the rest, and whether the run
    came back to its speed after the first one."""
    if not overhead:
        return "none ran"
    parts = [f"{overhead.get('windows', 0)} window(s)"]
    inside, outside = overhead.get("steps_per_s_inside"), overhead.get("steps_per_s_outside")
    if overhead.get("profiled_steps") and inside and outside:
        parts.append(f"{overhead['profiled_steps']} steps inside at {_significant(float(inside))} steps/s, "
                     f"{_significant(float(outside))} outside")
    before, after = overhead.get("before_steps_per_s"), overhead.get("after_steps_per_s")
    if before and after:
        parts.append(f"{_significant(float(before))} steps/s before the first, "
                     f"{_significant(float(after[0]))}-{_significant(float(after[1]))} after"
                     + (" (slowed)" if overhead.get("slowed") else ""))
    traced = overhead.get("traced_workers") or []
    if traced:
        parts.append(f"{len(traced)} worker(s) forked inside a window")
    started = overhead.get("start_pause_s")
    if started is not None and started >= PAUSE_NAMED_S:
        parts.append(f"the loop stood still {_significant(float(started))} s while a window started "
                     "(torch.profiler's start)")
    pause = overhead.get("stop_pause_s")
    if pause is not None and pause >= PAUSE_NAMED_S:
        parts.append(f"the loop stood still {_significant(float(pause))} s after a window while its trace was "
                     "collected")
    stackless = overhead.get("stackless_windows") or 0
    if stackless:
        parts.append(f"{stackless} window(s) recorded without Python stacks, to keep their stop short (their steps' "
                     "Python calls, counted before, or an earlier window's stop said it would hold the loop for "
                     "seconds): no call sites in them")
    undetached = overhead.get("cupti_undetached") or 0
    if undetached:
        parts.append(f"CUPTI's detach not seen to end after {undetached} window(s)")
    return "; ".join(parts)


def _rate(value: float | None, unit: str) -> str:
    return "not measured" if value is None else f"{_significant(float(value))} {unit}"


def _samples(value: float | None) -> str:
    return "" if value is None else f" ({_significant(float(value))} samples/s)"


def join_lines(lines: Iterable[str]) -> str:
    return "\n".join(lines) + "\n"


def trial_rows(report: Report) -> list[dict[str, str]]:
    """`diagnose --try`: one row per trial run, then one per finding not tried (with why).

    Each row: ``subject`` (finding IDs, or "asked for"), ``text`` (predicted vs measured,
    with what was applied), ``steps`` (steady steps without / with), ``report`` (the
    trial's own report, relative), ``numerics`` ("yes" when the remedy changes numerics)."""
    rows: list[dict[str, str]] = []
    for trial in report.trials or []:
        if not isinstance(trial, Mapping):
            continue
        steady = trial.get("steady_steps") or []
        rows.append({
            "subject": ", ".join(str(f) for f in trial.get("findings") or []) or "asked for",
            "text": str(trial.get("text") or ""),
            "steps": " / ".join(str(n) for n in steady) if len(steady) == 2 else "",
            "report": str(trial.get("report") or ""),
            "numerics": "yes" if trial.get("numerics_change") else "no",
        })
    for item in report.untried or []:
        if isinstance(item, Mapping):
            rows.append({"subject": str(item.get("subject") or "?"), "text": f"not tried: {item.get('why') or ''}",
                         "steps": "", "report": "", "numerics": ""})
    return rows


def try_heading(report: Report) -> str | None:
    """'Remedies tried (--try auto; every run --steps 200)', or None without --try."""
    asked = report.try_
    if not isinstance(asked, Mapping):
        return None
    requested = ",".join(str(r) for r in asked.get("requested") or []) or "auto"
    return f"Remedies tried (--try {requested}; every run {asked.get('bound') or 'unbounded'})"


def override_rows(report: Report) -> list[str]:
    """A `--try` trial run: each override the workload saw, in words ('num_workers: 0 -> 8 in
    DataLoader(mod.Items)'); empty for a plain run (nothing was changed)."""
    section = report.overrides
    if not isinstance(section, Mapping):
        return []
    rows = []
    for item in section.get("applied") or []:
        if not isinstance(item, Mapping):
            continue
        name, where = str(item.get("name") or "?"), item.get("where")
        if where == "held":
            text = f"{name} held: {item.get('note') or ''}"
        elif item.get("was") is not None:
            text = f"{name}: {item.get('was')} -> {item.get('value')}"
        else:
            text = f"{name}: {item.get('value')}"
        if where and where != "held":
            text += f" in {where}"
        if item.get("applied") is False:
            text += f" (not applied: {item.get('note') or 'no reason recorded'})"
        rows.append(text)
    if not rows and section.get("requested"):
        rows.append("requested, but the workload never reached them (no matching DataLoader or module)")
    return rows
