"""Run every probe, apply the policy and --ignore, and build the report dict.

Report schema `gpudoctor.preflight/1` (fields are only ever added):

    {"schema", "tool", "created_at", "duration_s", "verdict", "exit_code",
     "counts": {"pass", "warn", "fail", "not-checked"},
     "host": {...}, "policy": {"source", "values"}, "ignored": [{"id", "slug"}],
     "items": [{"id", "slug", "group", "title", "status", "found", "expected", "reason",
                "why", "fix", "fix_code", "source", "note", "values"}],
     "job": null | {"command", "exit_code", "stop_reason", "verdict", "summary", "findings", "files"}}
"""

from __future__ import annotations

import datetime
import logging
import platform
import socket
from collections.abc import Iterable
from typing import Any

from gpudoctor import __version__
from gpudoctor.agent.redact import redact_argv
from gpudoctor.base import exitcodes
from gpudoctor.preflight import env, gpu, health, host, job, links
from gpudoctor.preflight.context import Context
from gpudoctor.preflight.items import SPECS, find
from gpudoctor.preflight.model import (
    FAIL,
    NOT_CHECKED,
    STATUSES,
    WARN,
    ItemResult,
    Unread,
    not_checked,
)
from gpudoctor.preflight.policy import Policy

log = logging.getLogger(__name__)

SCHEMA = "gpudoctor.preflight/1"
PROBES = (gpu, health, links, host, env)


def machine_items(ctx: Context, only: set[str] | None = None) -> list[ItemResult]:
    """Every machine item (or `only` these), in catalog order. A probe that raises (a bug
    of ours) costs its own item only, which is not-checked with the error."""
    results = []
    for module in PROBES:
        for item_id, judge in module.ITEMS:
            if only is not None and item_id not in only:
                continue
            try:
                results.append(judge(ctx))
            except Exception as exc:
                log.debug("item %s failed", item_id, exc_info=True)
                results.append(not_checked(item_id, f"gpudoctor could not check it: {type(exc).__name__}: {exc} "
                                                    "(please report it)"))
    return results


def rejudge(results: list[ItemResult], ctx: Context, ids: Iterable[str]) -> list[ItemResult]:
    """The same results with these items judged again (after the job showed more)."""
    wanted = set(ids)
    fresh = {r.id: r for r in machine_items(ctx, only=wanted)}
    return [fresh.get(r.id, r) for r in results]


def apply_policy(
    results: Iterable[ItemResult], policy: Policy, ignore: Iterable[str]
) -> tuple[list[ItemResult], list[str]]:
    """Drop ignored items (IDs or slugs; returns their IDs) and turn the warnings and
    not-checked results the policy names into failures."""
    ignored = {spec.id for spec in (find(name) for name in [*ignore, *policy.ignore]) if spec is not None}
    kept = []
    for result in results:
        if result.id in ignored:
            continue
        slug = SPECS[result.id].slug
        if result.status == WARN and policy.escalates("warnings_fail", result.id, slug):
            result = _escalate(result, "the policy makes this warning a failure (warnings_fail)")
        elif result.status == NOT_CHECKED and policy.escalates("not_checked_fails", result.id, slug):
            result = _escalate(result, "the policy makes an unchecked item a failure (not_checked_fails)")
        kept.append(result)
    return kept, sorted(ignored)


def _escalate(result: ItemResult, note: str) -> ItemResult:
    found = result.found if result.status != NOT_CHECKED else f"not checked: {result.reason}"
    return ItemResult(result.id, FAIL, found, result.expected, reason=result.reason, fix_code=result.fix_code,
                      values=result.values, note=note)


def exit_code(results: Iterable[ItemResult]) -> int:
    return exitcodes.ITEM_FAILED if any(r.status == FAIL for r in results) else exitcodes.OK


def item_dict(result: ItemResult) -> dict[str, Any]:
    spec = SPECS[result.id]
    return {
        "id": spec.id, "slug": spec.slug, "group": spec.group, "title": spec.title,
        "status": result.status, "found": result.found, "expected": result.expected, "reason": result.reason,
        "why": spec.why, "fix": spec.fix, "fix_code": result.fix_code or spec.fix_code, "source": spec.source,
        "note": result.note, "values": result.values,
    }


def verdict(counts: dict[str, int], failed: list[str]) -> str:
    parts = [f"{counts['pass']} pass"]
    parts += [f"{counts[s]} {label}" for s, label in ((WARN, "warn"), (NOT_CHECKED, "not checked")) if counts[s]]
    if failed:
        return f"Not ready: {len(failed)} item{'s' if len(failed) > 1 else ''} failed ({', '.join(failed[:4])}" + \
               (", ..." if len(failed) > 4 else "") + "); " + ", ".join(parts) + "."
    return "Ready: no item failed; " + ", ".join(parts) + "."


def _plain(value: Any) -> Any:
    return None if isinstance(value, Unread) else value


def host_facts(ctx: Context) -> dict[str, Any]:
    nv, t = ctx.nvml, ctx.torch
    cuda = nv.cuda_driver_version
    return {
        "name": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": _plain(t.version),
        "torch_cuda": _plain(t.cuda),
        "driver": _plain(nv.driver),
        "driver_cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
        "nvml_error": nv.error,
        "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid, "bus_id": _plain(g.get("bus_id")),
                  "memory_total_bytes": _plain(g.get("memory_total")),
                  "visible": g in ctx.visible} for g in nv.gpus],
    }


def job_dict(run: job.JobRun | None) -> dict[str, Any] | None:
    if run is None:
        return None
    report = run.report
    findings = [
        {k: f.get(k) for k in ("id", "slug", "severity", "title", "message", "consequence_of", "estimated_gain")}
        | {"remedy": (f.get("remedy") or {}).get("text")}
        for f in report.get("findings") or []
    ]
    return {
        "command": redact_argv([str(a) for a in report.get("command") or []]),
        "exit_code": run.exit_code,
        "workload_exit_code": report.get("exit_code"),
        "stop_reason": report.get("stop_reason"),
        "duration_s": report.get("duration_s"),
        "verdict": (report.get("summary") or {}).get("verdict"),
        "summary": report.get("summary") or {},
        "findings": findings,
        "files": dict(run.files),
    }


def build_report(results: list[ItemResult], ctx: Context, *, ignored: list[str], run: job.JobRun | None,
                 started: datetime.datetime, duration_s: float) -> dict[str, Any]:
    counts = {s: sum(1 for r in results if r.status == s) for s in STATUSES}
    failed = [f"{r.id} {SPECS[r.id].slug}" for r in results if r.status == FAIL]
    return {
        "schema": SCHEMA,
        "tool": {"name": "gpudoctor", "version": __version__},
        "created_at": started.isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 3),
        "verdict": verdict(counts, failed),
        "exit_code": exit_code(results),
        "counts": counts,
        "host": host_facts(ctx),
        "checkpoint_dir": str(ctx.checkpoint_dir),
        "policy": {"source": ctx.policy.source, "values": ctx.policy.values()},
        "ignored": [{"id": i, "slug": SPECS[i].slug} for i in ignored],
        "items": [item_dict(r) for r in results],
        "job": job_dict(run),
    }
