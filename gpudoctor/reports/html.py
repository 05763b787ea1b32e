"""The HTML report: one self-contained file to attach to a ticket.

jinja2 with autoescaping renders templates/report.html. The page makes no network
request of any kind: styles are inline, charts are inline SVG, and a
Content-Security-Policy meta tag forbids everything else (`default-src 'none'`).
The one small script (copy buttons, open <details> for printing) is allowed by
its SHA-256 hash, so no other script, injected or not, can run.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from gpudoctor.base.jsonmodel import is_real
from gpudoctor.base.text import format_bytes, format_duration
from gpudoctor.verdict.report_model import Report, ReportFinding, Summary

from . import charts, template_cache
from ._common import (
    command_line,
    environment_rows,
    evidence_items,
    exit_code_text,
    format_number,
    gain_text,
    gpu_names,
    override_rows,
    prediction_headline,
    prediction_steps,
    prediction_text,
    printable_report,
    skipped_checks,
    stage_name,
    stopped_as_asked,
    summary_rows,
    trial_rows,
    try_heading,
)
from ._hotspots import windows_view
from .formats import PLAIN, RenderOptions
from .ranks import html_context as ranks_context
from .timeline_view import timeline_views

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"

# The timeline (templates/_timeline.html): zoom and pan by the plot's viewBox, tick labels in
# the axis, and a finding's link highlighting the gaps of its cause. Without a script the
# whole picture shows, with its tooltips.
TIMELINE_SCRIPT = (
    "(function(){"
    "var plots=[];"
    "document.querySelectorAll('section.tl-wrap').forEach(function(sec){"
    "var plot=sec.querySelector('svg.tl-plot'),axis=sec.querySelector('svg.tl-axis');if(!plot||!axis)return;"
    "plots.push(plot);var NS=plot.namespaceURI,W=+plot.dataset.width,US=+plot.dataset.us,"
    "H=plot.viewBox.baseVal.height,x0=0,w=W;"
    "function fmt(us){return us>=1e6?(us/1e6).toFixed(2)+' s':us>=1e3?(us/1e3).toFixed(us>=1e4?0:1)+' ms':"
    "us.toFixed(0)+' us';}"
    "function ticks(){while(axis.firstChild)axis.removeChild(axis.firstChild);"
    "var px=plot.getBoundingClientRect().width;if(!px)return;var a=x0/W*US,span=w/W*US,"
    "raw=span/Math.max(2,Math.floor(px/90)),p=Math.pow(10,Math.floor(Math.log10(raw))),"
    "step=[1,2,5,10].map(function(m){return m*p;}).filter(function(v){return v>=raw;})[0];"
    "for(var t=Math.ceil(a/step)*step;t<=a+span;t+=step){var e=document.createElementNS(NS,'text');"
    "e.setAttribute('x',((t-a)/span*px).toFixed(1));e.setAttribute('y','12');e.textContent=fmt(t);"
    "axis.appendChild(e);}}"
    "function view(nx,nw){w=Math.min(W,Math.max(W/2000,nw));x0=Math.min(W-w,Math.max(0,nx));"
    "plot.setAttribute('viewBox',x0+' 0 '+w+' '+H);ticks();}"
    "function zoom(f,at){var c=at===undefined?x0+w/2:at;view(c-(c-x0)/f,w/f);}"
    "plot.addEventListener('wheel',function(ev){ev.preventDefault();var r=plot.getBoundingClientRect();"
    "zoom(ev.deltaY<0?1.5:1/1.5,x0+(ev.clientX-r.left)/r.width*w);},{passive:false});"
    "var drag=null;plot.addEventListener('pointerdown',function(ev){drag=[ev.clientX,x0];});"
    "window.addEventListener('pointerup',function(){drag=null;});"
    "window.addEventListener('pointermove',function(ev){if(!drag)return;"
    "view(drag[1]-(ev.clientX-drag[0])/plot.getBoundingClientRect().width*w,w);});"
    "sec.querySelectorAll('.tl-tools button').forEach(function(b){b.addEventListener('click',function(){"
    "var z=b.dataset.zoom;if(z==='reset')view(0,W);else zoom(z==='in'?2:0.5);});});"
    "window.addEventListener('resize',ticks);sec.addEventListener('toggle',ticks,true);ticks();});"
    "var plot=plots[0];if(!plot)return;"
    "document.querySelectorAll('a.tl-link').forEach(function(a){a.addEventListener('click',function(){"
    "var c=a.dataset.cause,again=plot.dataset.hl===c,n=0;plot.classList.toggle('hl',!again);"
    "plot.dataset.hl=again?'':c;plot.querySelectorAll('[data-cause]').forEach(function(g){"
    "var on=!again&&g.dataset.cause===c;g.classList.toggle('on',on);if(on&&g.tagName==='rect')n++;});"
    "plot.dataset.highlighted=n;"
    "document.querySelectorAll('a.tl-link').forEach(function(o){o.classList.toggle('active',!again&&o===a);});"
    "});});"
    "})();"
)

# Progressive enhancement: buttons are added by the script, so a viewer that strips
# scripts (a ticket system, an email client) shows no dead buttons.
SCRIPT = (
    "(function(){"
    "function sel(c){var r=document.createRange();r.selectNodeContents(c);"
    "var s=window.getSelection();s.removeAllRanges();s.addRange(r);}"
    "document.querySelectorAll('pre.code').forEach(function(p){"
    "var c=p.querySelector('code');if(!c)return;var b=document.createElement('button');"
    "b.type='button';b.className='copy';b.textContent='Copy';"
    "b.addEventListener('click',function(){var done=function(){b.textContent='Copied';"
    "setTimeout(function(){b.textContent='Copy';},1500);};"
    "if(navigator.clipboard&&navigator.clipboard.writeText){"
    "navigator.clipboard.writeText(c.textContent).then(done,function(){sel(c);});}"
    "else{sel(c);}});p.insertBefore(b,c);});"
    "window.addEventListener('beforeprint',function(){"
    "document.querySelectorAll('details').forEach(function(d){d.open=true;});});"
    "})();"
    + TIMELINE_SCRIPT
)


def script_hash(script: str = SCRIPT) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def content_security_policy(script: str = SCRIPT) -> str:
    return (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src '{script_hash(script)}'; base-uri 'none'; form-action 'none'"
    )


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """One environment per process: templates compile once (jinja2 caches them in it), or are
    loaded compiled by an earlier run (template_cache)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,  # every template, whatever its file name
        # a field missing from an older or hand-edited report renders empty, not a crash
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = format_number
    env.filters["duration"] = lambda v: format_duration(float(v)) if is_real(v) else "not measured"
    env.filters["bytes"] = lambda v: format_bytes(float(v)) if is_real(v) else "not measured"
    template_cache.attach(env)  # keyed by the environment as now made: last
    return env


# charts drawn ahead of their page (`prepare`), by (chart function, its data's items as repr shows them)
_drawn: dict[tuple[str, str], str | None] = {}


def prepare(kernel_hist: Mapping[str, Any] | None = None) -> None:
    """Make ready what a page needs before its report is judged, while other work runs (analyze
    does it while its helper process replays): the template compiled and, given the profile's
    kernel duration histogram, its chart drawn (for the next page whose histogram is the same)."""
    environment().get_template("report.html")
    if kernel_hist:
        try:
            svg = charts.kernel_histogram(kernel_hist)
        except Exception:  # noqa: BLE001  (drawn again with the page, which says what failed)
            return
        _drawn[_chart_key(charts.kernel_histogram, kernel_hist)] = svg


def _chart_key(fn: Callable[[Any], str | None], data: Mapping[str, Any]) -> tuple[str, str]:
    return (getattr(fn, "__qualname__", "?"), repr(list(data.items())))


def _drawn_chart(fn: Callable[[Any], str | None], data: Any) -> str | None:
    """The chart of `data`: drawn ahead by `prepare` (taken once), else now."""
    if _drawn and isinstance(data, Mapping):
        key = _chart_key(fn, data)
        if key in _drawn:
            return _drawn.pop(key)
    return fn(data)


def render(report: Report | Mapping[str, Any], options: RenderOptions = PLAIN) -> str:
    """The self-contained page (a formats.Renderer: every finding is shown, whatever the options)."""
    template = environment().get_template("report.html")
    return template.render(**context(printable_report(report)))  # no terminal controls, even in a page


def context(report: Report) -> dict[str, Any]:
    # evidence is the Session's own data (gpudoctor.session/1), free JSON in the report
    evidence = report.evidence
    unavailable = evidence.get("unavailable") or {}
    timeline = evidence.get("timeline") or {}
    profile = evidence.get("profile") or None
    summary = report.summary
    pictures = _view(timeline_views, report) or []
    return {
        "csp": content_security_policy(),
        "script": Markup(SCRIPT),  # our constant: its bytes must match the CSP hash
        "report": report,
        "tool": report.tool,
        "summary": summary,
        "verdict": summary.verdict or "No verdict recorded.",
        "exit_code": exit_code_text(report),
        "stopped_as_asked": stopped_as_asked(report),
        "worst": _worst(report),
        "command": command_line(report),
        "gpus": ", ".join(gpu_names(report)) or "no GPU recorded",
        "summary_rows": summary_rows(report),
        "findings": [_finding_view(f, report.docs, pictures[0]["links"] if pictures else {}) for f in report.findings],
        "timelines": pictures,
        "checks": list(report.checks),
        "skipped": skipped_checks(report),
        "environment_rows": environment_rows(report),
        "timeline_svg": _chart(charts.timeline, timeline),
        "timeline_missing": _why(unavailable, ("gpu", "cpu"), "no GPU or CPU samples were recorded"),
        "steps_svg": _chart(charts.step_breakdown, timeline.get("steps") or {}),
        "steps_missing": _why(unavailable, ("steps",), "no step boundaries were recorded"),
        "step_numbers": _step_numbers(summary),
        "profile": _profile_view(profile) if profile else None,
        "profile_missing": _why(unavailable, ("profile",), "no profiler window was recorded"),
        "windows": windows_view(report),
        "kernel_svg": _chart(charts.kernel_histogram, (profile or {}).get("kernel_duration_hist") or {}),
        "allocator": [_allocator_view(a) for a in evidence.get("allocator") or []],
        "allocator_missing": _why(unavailable, ("allocator",), "no allocator statistics were recorded"),
        "loaders": evidence.get("loaders") or [],
        "storage": evidence.get("storage") or [],
        "errors": evidence.get("errors") or [],
        "unavailable": unavailable,
        "notes": evidence.get("notes") or [],
        "files": report.files,
        "try_heading": try_heading(report),
        "trials": trial_rows(report),
        "overrides": override_rows(report),
        **ranks_context(report, lambda steps: _chart(charts.step_breakdown, steps)),
    }


def _worst(report: Report) -> str:
    for f in report.root_causes():
        if f.severity in ("critical", "warning"):
            return f.severity
    return "ok"


def _view(fn: Callable[[Report], list[dict[str, Any]]], report: Report) -> list[dict[str, Any]] | None:
    """A picture laid out from the report, or None: like a chart, a broken one costs that picture only."""
    try:
        return fn(report)
    except Exception as exc:  # noqa: BLE001  (one picture lost, never the report)
        log.warning("view %s failed: %s", getattr(fn, "__name__", "?"), exc)
        return None


def _finding_view(f: ReportFinding, docs: Mapping[str, Any], links: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": f.id or "?",
        "slug": f.slug,
        "severity": f.severity,
        "stage": stage_name(f.stage),
        "title": f.title,
        "message": f.message,
        "evidence": evidence_items(f),
        "remedy_text": f.remedy.text if f.remedy else None,
        "remedy_code": f.remedy.code if f.remedy else None,
        "gain": gain_text(f.estimated_gain) if f.estimated_gain is not None else None,
        "window": f.window,
        "prediction": prediction_text(f),
        "headline": prediction_headline(f),
        "derivation": prediction_steps(f),
        "gaps": links.get(f.id or ""),
        "prediction_detail": f.prediction.detail if f.prediction else None,
        "consequence_of": f.consequence_of,
        "doc": _doc(docs, f.id),
        "trial": f.trial.get("text") if isinstance(f.trial, Mapping) else None,
    }


def _doc(docs: Mapping[str, Any], check_id: str) -> str | None:
    doc = docs.get(check_id)
    return doc if isinstance(doc, str) and doc.strip() else None


def _chart(fn: Callable[[Any], str | None], data: Any) -> Markup | None:
    """The SVG as trusted markup (matplotlib's output, checked by charts.to_svg), or
    None: a broken chart must cost the reader one picture, not the whole report."""
    try:
        svg = _drawn_chart(fn, data)
    except Exception as exc:  # noqa: BLE001  (one picture lost, never the report)
        log.warning("chart %s failed: %s", getattr(fn, "__name__", "?"), exc)
        return None
    return Markup(svg) if svg else None


def _why(unavailable: Mapping[str, Any], facts: tuple[str, ...], default: str) -> str:
    reasons = [f"{fact}: {unavailable[fact]}" for fact in facts if unavailable.get(fact)]
    return "; ".join(reasons) or default


def _step_numbers(summary: Summary) -> list[tuple[str, str]]:
    median = summary.step_time_median_s
    share = summary.data_wait_share
    if median is None:
        return []
    rows = [("Median step time", format_duration(median))]
    if share is not None:
        rows.append(("Waiting for data", f"{format_duration(median * share)} ({share:.0%})"))
        rows.append(("Compute and the rest", f"{format_duration(median * (1 - share))} ({1 - share:.0%})"))
    return rows


def _profile_view(p: Mapping[str, Any]) -> dict[str, Any]:
    busy, idle = p.get("gpu_busy_us") or 0.0, p.get("gpu_idle_us") or 0.0

    def us(value: Any) -> str:
        return format_duration((value or 0) / 1e6)

    rows = [
        ("Profiled window", f"{p.get('steps', 0)} steps, {format_duration(float(p.get('window_s') or 0))}"),
        ("Kernels", f"{p.get('kernel_count', 0):,} ({us(p.get('kernel_total_us'))} GPU time)"),
        ("Median kernel", format_number(p.get("kernel_median_us"), "us")),
        ("GPU busy / idle", f"{format_duration(busy / 1e6)} / {format_duration(idle / 1e6)}"
         + (f" ({busy / (busy + idle):.0%} busy)" if busy + idle > 0 else "")),
        ("Idle gaps: kernel-to-kernel / host waits",
         f"{us(p.get('idle_gap_kernel_to_kernel_us'))} / {us(p.get('idle_gap_host_wait_us'))}"),
        ("Launches (CPU time)", f"{p.get('launch_count', 0):,} ({us(p.get('launch_total_us'))})"),
        ("Kernels shorter than their launch", f"{p.get('short_kernel_count', 0):,}"),
        ("Host synchronisations", f"{p.get('sync_count', 0):,} ({us(p.get('sync_total_us'))})"),
        ("Matmul: fp32 / tensor cores / total",
         " / ".join(us(p.get(k)) for k in ("matmul_fp32_us", "matmul_tensor_core_us", "matmul_total_us"))),
        ("TF32 enabled", format_number(p.get("tf32_enabled"))),
    ]
    streams = [s for s in p.get("streams") or [] if isinstance(s, Mapping)]
    if len(streams) > 1:  # busy / idle above are their union: idle is time with no stream active
        rows.append(("Streams (busy time)", "; ".join(
            f"{s.get('stream')}: {format_duration((s.get('busy_us') or 0) / 1e6)}"
            + (f" ({s['busy_share']:.0%})" if isinstance(s.get("busy_share"), (int, float)) else "")
            for s in streams[:8])))
    memcpy = [
        (kind, f"{int(v.get('count', 0)):,}", format_bytes(v.get("bytes")), format_duration((v.get("us") or 0) / 1e6))
        for kind, v in (p.get("memcpy") or {}).items()
        if isinstance(v, Mapping)
    ]
    return {
        "rows": rows,
        "top_kernels": p.get("top_kernels") or [],
        "top_ops": p.get("top_ops") or [],
        "memcpy": memcpy,
        "sync_sites": p.get("sync_sites") or [],
        "trace_file": p.get("trace_file"),
        "error": p.get("error"),
    }


def _allocator_view(a: Mapping[str, Any]) -> dict[str, str]:
    total = a.get("device_total_bytes")
    peak = a.get("max_allocated_bytes")
    return {
        "label": str(a.get("label") or ""),
        "t": format_duration(float(a.get("t") or 0)),
        "allocated": format_bytes(a.get("allocated_bytes")),
        "reserved": format_bytes(a.get("reserved_bytes")),
        "inactive_split": format_bytes(a.get("inactive_split_bytes")),
        "peak": format_bytes(peak) + (f" ({peak / total:.0%} of device)" if peak and total else ""),
        "retries": str(a.get("num_alloc_retries", 0)),
        "ooms": str(a.get("num_ooms", 0)),
        "expandable": format_number(a.get("expandable_segments")),
    }
