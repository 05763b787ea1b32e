"""Scoring the accuracy corpus: the prediction a report makes for a remedy, the realized gain, the goal, the table.

Pure functions over the runner's records (benchmarks/corpus/run.py), so that they can be
tested without running anything.
"""

from __future__ import annotations

import os
import platform
import statistics
from typing import Any

from manifest import Remedy, Workload

WITHIN = 0.30  # |predicted / realized - 1| counted as accurate
OFF_BY = 2.0  # predicted / realized beyond 2x either way: a miss the goal forbids
CRITICAL_MIN = 1.1  # a critical finding's remedy must realize at least this
UNNAMED_MAX = 1.5  # a remedy realizing more than this must be named by the report


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    return {"id": f.get("id"), "severity": f.get("severity"), "title": f.get("title"),
            "predicted": f.get("estimated_gain"), "method": (f.get("prediction") or {}).get("method")}


def top_finding(report: dict[str, Any]) -> dict[str, Any] | None:
    findings = [f for f in report.get("findings") or [] if not f.get("consequence_of")]
    serious = [f for f in findings if f.get("severity") in ("critical", "warning")]
    chosen = (serious or findings or [None])[0]
    return _finding(chosen) if chosen else None


def gain_at(curve: list[dict[str, Any]], multiple: float) -> float | None:
    """The gain at MULTIPLE times the batch from a finding's ``batch_curve``, read as the report's own
    model reads it (gpudoctor.model.Prediction.gain_at); None below 1x or without a curve."""
    from gpudoctor.model import Prediction

    points = tuple(sorted((float(p["multiple"]), float(p["gain"]))
                          for p in curve if p.get("multiple") and p.get("gain")))
    at = Prediction(gain=1.0, method="model", label="", detail="", batch_curve=points).gain_at(multiple)
    return round(at, 4) if at is not None else None


def gain_with(curve: list[dict[str, Any]], workers: int) -> float | None:
    """The gain with WORKERS DataLoader workers from a finding's ``worker_curve``, read as the report's own
    model reads it (gpudoctor.model.Prediction.gain_with); None without a curve or at no more workers than now."""
    from gpudoctor.model import Prediction

    points = tuple(sorted((int(p["workers"]), float(p["gain"])) for p in curve
                          if p.get("workers") is not None and p.get("gain")))
    at = Prediction(gain=1.0, method="model", label="", detail="", worker_curve=points).gain_with(workers)
    return round(at, 4) if at is not None else None


def prediction(report: dict[str, Any], remedy: Remedy) -> dict[str, Any]:
    """The gain the report predicts for REMEDY: the first target finding it names, the others as cross-checks.
    A remedy that changes the samples per step (``step_scale``) reads a finding's samples/s curve at that multiple;
    one that sets a worker count (``workers``) reads the finding's worker curve at that count, when it has one
    (the finding's own number is for the count it recommends); one whose number the finding gives as evidence
    (``evidence``: GD301's gain is for CUDA graphs, its ``compiled_gain`` for plain torch.compile) reads that,
    and has no number where the finding gives none."""
    named = [f for f in report.get("findings") or [] if f.get("id") in remedy.targets]
    if not named:
        return {"named": False, "predicted": 1.0, "method": "none named", "finding": None, "cross_checks": []}
    scaled = remedy.step_scale != 1.0

    def curve(f: dict[str, Any]) -> list[dict[str, Any]]:
        return (f.get("prediction") or {}).get("batch_curve") or []

    def worker_curve(f: dict[str, Any]) -> list[dict[str, Any]]:
        return (f.get("prediction") or {}).get("worker_curve") or []

    # a batch remedy: a finding with a samples/s curve first, a worker remedy one with a worker curve (a
    # finding that advises no workers still says what they would do); then a cause before its
    # consequences, a finding with a number before one without; else the report's order
    chosen = min(named, key=lambda f: (scaled and not curve(f), remedy.workers is not None and not worker_curve(f),
                                       f.get("estimated_gain") is None, bool(f.get("consequence_of"))))
    predicted, method = chosen.get("estimated_gain"), (chosen.get("prediction") or {}).get("method")
    if remedy.evidence:  # the finding's gain is another remedy's; this one's number is in its evidence
        own = (chosen.get("evidence") or {}).get(remedy.evidence) or {}
        predicted, method = own.get("value"), f"{remedy.evidence}, {own.get('label') or 'not given'}"
    at = gain_at(curve(chosen), remedy.step_scale) if scaled and curve(chosen) else None
    if at is not None:
        predicted, method = round(at, 2), f"{method}, at {remedy.step_scale:g}x the batch"
    workers = worker_curve(chosen)
    with_count = gain_with(workers, remedy.workers) if remedy.workers is not None and workers else None
    if with_count is not None:
        predicted, method = round(with_count, 2), f"{method}, with {remedy.workers} workers"
    finding = _finding(chosen)
    if remedy.evidence:  # the row is judged as the finding would be on this number alone
        finding.update(predicted=predicted, severity=_severity(predicted))
    return {"named": True, "predicted": predicted, "method": method, "finding": finding,
            "cross_checks": [_finding(f) for f in named if f is not chosen]}


def _severity(gain: float | None) -> str | None:
    """The severity gpudoctor gives a finding of this gain (gpudoctor.analysis.prediction.severity_for)."""
    from gpudoctor.analysis.prediction import severity_for

    return severity_for(gain) if gain is not None else None


def realized(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over pairs of remedy / baseline throughput; why none where no pair has both."""
    ratios = [p["ratio"] for p in pairs if p.get("ratio") is not None]
    if ratios:
        return {"realized": round(statistics.median(ratios), 4), "ratios": ratios}
    if any(p.get("baseline_error") and not p.get("remedy_error") for p in pairs):
        return {"realized": None, "ratios": [], "note": "the baseline failed where the remedy ran"}
    return {"realized": None, "ratios": [], "note": "no pair measured both"}


def judge(row: dict[str, Any]) -> None:
    """Error and goal flags of one remedy row, in place."""
    # plain floats and bools: a numpy scalar (a gain read from a curve) would be written as the text "False",
    # which reads as true
    predicted = float(row["predicted"]) if row.get("predicted") is not None else None
    real = float(row["realized"]) if row.get("realized") is not None else None
    row["error"] = round(predicted / real - 1, 4) if predicted and real else None
    row["within_30"] = bool(abs(row["error"]) <= WITHIN) if row["error"] is not None else None
    row["off_by_2x"] = bool(predicted / real > OFF_BY or real / predicted > OFF_BY) if predicted and real else None
    finding = row.get("finding") or {}
    row["critical_under_1_1"] = finding.get("severity") == "critical" and real is not None and real < CRITICAL_MIN
    row["unnamed_over_1_5"] = row.get("named") is False and real is not None and real > UNNAMED_MAX


MIN_WORKLOADS = 30  # issue 25: a corpus of at least 30 workloads, at least half of them public scripts


def goal(entries: list[dict[str, Any]], min_workloads: int = MIN_WORKLOADS) -> dict[str, Any]:
    """The issue's goal over ENTRIES: 80% of the compared predictions within 30%, none off by more than
    2x, no critical finding realizing under 1.1x, no unnamed remedy over 1.5x, measured on at least
    MIN_WORKLOADS workloads of which at least half are public scripts (a few rows meet no goal)."""
    rows = [r for e in entries for r in e.get("remedies") or []]
    compared = [r for r in rows if r.get("error") is not None]
    within = sum(1 for r in compared if r["within_30"])
    measured = [e for e in entries if any(r.get("error") is not None for r in e.get("remedies") or [])]
    public = sum(1 for e in measured if e.get("public"))
    result = {
        "workloads": len(measured), "public": public, "min_workloads": min_workloads,
        "remedies": len(rows), "compared": len(compared), "within_30": within,
        "within_30_share": round(within / len(compared), 3) if compared else None,
        "off_by_2x": [f"{r['workload']}: {r['remedy']}" for r in compared if r["off_by_2x"]],
        "critical_under_1_1": [f"{r['workload']}: {r['remedy']}" for r in rows if r.get("critical_under_1_1")],
        "unnamed_over_1_5": [f"{r['workload']}: {r['remedy']}" for r in rows if r.get("unnamed_over_1_5")],
    }
    result["met"] = len(measured) >= min_workloads and 2 * public >= len(measured) and bool(compared) \
        and within >= 0.8 * len(compared) and not (
        result["off_by_2x"] or result["critical_under_1_1"] or result["unnamed_over_1_5"])
    return result


def x_gain(value: float | None) -> str:
    """A gain as the table shows it."""
    return "-" if value is None else f"{value:.2f}x"


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    head = (f"Accuracy corpus (`benchmarks/corpus/run.py`), {meta['date']}, {meta['device']}; torch {meta['torch']}, "
            f"gpudoctor {meta['gpudoctor']}; realized = median of {meta['pairs']} alternated plain pair(s), "
            "predicted = one `gpudoctor diagnose` of the baseline.")
    lines = [head, "",
             "| workload | remedy | finding | predicted (method) | realized | error |", "|---|---|---|---|---|---|"]
    for entry in results["workloads"]:
        if not entry.get("remedies") or entry["status"].startswith("not run"):
            lines.append(f"| {entry['workload']} | {entry['status']} | | | | |")
            continue
        for row in entry["remedies"]:
            finding = row.get("finding") or {}
            label = f"{finding['id']} {finding.get('severity')}" if finding else ("not named" if row.get("named") is
                                                                                  False else "no report")
            predicted = f"{x_gain(row.get('predicted'))} ({row.get('method') or 'no method'})" \
                if row.get("predicted") is not None else "no number"
            real = x_gain(row.get("realized")) if row.get("realized") is not None else row.get("note", "-")
            error = f"{row['error']:+.0%}" if row.get("error") is not None else ""
            lines.append(f"| {entry['workload']} | {_cell(row['remedy'])} | {label} | {_cell(predicted)} | "
                         f"{_cell(real)} | {error} |")
    g = results["goal"]
    unnamed = ", ".join(g["unnamed_over_1_5"]) or "none"
    share = f"{g['within_30_share']:.0%}" if g["within_30_share"] is not None else "-"
    lines += ["", f"Goal (issue 25): {'met' if g['met'] else 'not met'}.",
              (f"- workloads measured: {g['workloads']}, {g['public']} of them public scripts (goal: at least "
              f"{g['min_workloads']}, half of them public)"),
              f"- within 30% of the realized gain: {g['within_30']} of {g['compared']} ({share}; goal 80%)",
              f"- off by more than 2x: {', '.join(g['off_by_2x']) or 'none'}",
              f"- critical findings whose remedy realized under 1.1x: {', '.join(g['critical_under_1_1']) or 'none'}",
              f"- remedies realizing over 1.5x that the report does not name: {unnamed}"]
    lines += _provenance(results)
    unfinished = [e for e in results["workloads"] if e["status"] != "done"]
    if unfinished:
        lines += ["", "Not measured in full:"]
        lines += [f"- {e['workload']}: {e['status']}{'; ' if e['notes'] else ''}{_cell('; '.join(e['notes']))}"
                  for e in unfinished]
    return "\n".join(lines) + "\n"


def _provenance(results: dict[str, Any]) -> list[str]:
    """Which predictions were made again from the kept sessions, by which gpudoctor; which cannot be."""
    again = results["meta"].get("repredicted")
    lines = []
    if again:
        lines += ["", (f"Predictions made again from the kept sessions (`benchmarks/corpus/repredict.py`), "
                       f"{again['date']}, gpudoctor {again['gpudoctor']} ({again.get('commit') or 'commit unknown'}): "
                       f"{', '.join(again['workloads']) or 'none'}.")]
    unkept = [e for e in results["workloads"] if not (e.get("kept") or {}).get("session")
              and not e["status"].startswith("not run")]
    if unkept:
        lines += ["", "No session kept (these predictions cannot be made again without the GPU):"]
        lines += [f"- {e['workload']}: {_cell(str((e.get('kept') or {}).get('why') or 'not kept'))}" for e in unkept]
    return lines


def listing(workloads: tuple[Workload, ...]) -> str:
    """The manifest as a table: what each workload is, what it targets, what it needs."""
    lines = ["| workload | source | causes | remedies (targets) | needs | generated data |",
             "|---|---|---|---|---|---|"]
    for w in workloads:
        source = f"{w.source.repo}@{w.source.commit[:10]}:{w.source.paths[0]}" if w.source else "synthetic"
        remedies = "; ".join(f"{r.name} ({', '.join(r.targets) or 'control'})" for r in w.remedies)
        lines.append(f"| {w.name} | {source} | {', '.join(w.causes)} | {_cell(remedies)} | {', '.join(w.needs)} | "
                     f"{', '.join(w.data) or '-'} |")
    return "\n".join(lines)


def device(entries: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The GPU's name and torch's version as the first report gives them."""
    torch_version = None
    for entry in entries:
        env = (entry.get("diagnose") or {}).get("environment") or {}
        torch_version = torch_version or env.get("torch")
        gpus = env.get("gpus") or []
        if gpus and gpus[0].get("name"):
            # the cores the workload had (a slot's share of the host), not those of the machine writing this
            cores = (env.get("cpu") or {}).get("usable_cores") or os.cpu_count()
            return f"{gpus[0]['name']}, {cores:g} cores", env.get("torch")
    return f"CPU only ({platform.machine()}, {os.cpu_count()} cores)", torch_version
