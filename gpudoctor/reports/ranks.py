"""The report's per-rank part (a distributed job): the JSON `ranks` section and its views.

Kept in one module so that every renderer's rank table comes from one place:
`ranks_section` builds the JSON section from the Session; `rank_rows` formats it for
the terminal (`terminal_table`), markdown (`markdown_lines`) and HTML (`html_context`,
rendered by the ``ranks`` block of templates/report.html).
"""

from __future__ import annotations

from typing import Any

from gpudoctor.analysis import ranks as rank_analysis
from gpudoctor.report_model import RanksSection, Report
from gpudoctor.session import Session

TIMELINE_MAX_POINTS = 400


def ranks_section(session: Session) -> dict[str, Any] | None:
    """The JSON `ranks` section: per-rank numbers, the primary and the worst rank, and the
    worst rank's step timeline. None for a one-process run."""
    if not session.ranks:
        return None
    worst = rank_analysis.worst_rank(session)
    rows = []
    for numbers, info in zip(rank_analysis.all_ranks(session), sorted(session.ranks, key=lambda r: r.rank)):
        rows.append({
            "rank": numbers.rank, "host": numbers.host, "pid": info.pid, "local_rank": info.local_rank,
            "backend": info.backend, "steps": numbers.steps,
            "step_time_s": _round(numbers.step_s), "own_time_s": _round(numbers.own_s),
            "backward_s": _round(numbers.backward_s),
            "data_wait_share": _round(numbers.data_wait_share, 4),
            "gpu_busy_percent": _round(numbers.gpu_busy_percent, 2),
            "comm_share": _round(numbers.comm_share, 4), "comm_overlap": _round(numbers.comm_overlap, 4),
            "loader_workers": info.loader_workers, "error": info.error,
        })
    timeline: dict[str, list[Any]] = {"t": [], "duration_s": [], "data_wait_s": [], "backward_s": []}
    worst_info = next((r for r in session.ranks if r.rank == worst), None)
    if worst_info is not None:
        records = worst_info.steps.records
        stride = max(1, len(records) // TIMELINE_MAX_POINTS + (len(records) % TIMELINE_MAX_POINTS > 0))
        for r in records[::stride]:
            timeline["t"].append(round(r.t, 3))
            timeline["duration_s"].append(r.duration_s)
            timeline["data_wait_s"].append(r.data_wait_s)
            timeline["backward_s"].append(r.backward_s)
    return {
        "world_size": max((r.world_size or 0 for r in session.ranks), default=0) or len(session.ranks),
        "recorded": len(session.ranks),
        "job_id": session.job_id,
        "primary_rank": session.primary_rank,
        "worst_rank": worst,
        "hosts": sorted({r.host for r in session.ranks if r.host}),
        "rows": rows,
        "worst_timeline": timeline,
    }


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def _ms(value: Any) -> str:
    return "n/a" if value is None else f"{float(value) * 1e3:.1f} ms"


def _share(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.0%}"


def rank_rows(report: Report) -> list[dict[str, str]]:
    """The table's rows as text: rank, host, step time, own time, data wait, GPU busy, comm."""
    section = report.ranks
    if section is None:
        return []
    out = []
    for row in section.rows:
        comm = _share(row.comm_share)
        if row.comm_overlap is not None:
            comm += f" ({_share(row.comm_overlap)} overlapped)"
        mark = " (worst)" if row.rank == section.worst_rank and len(section.rows) > 1 else ""
        out.append({
            "rank": f"{row.rank}{mark}",
            "host": row.host or "?",
            "step": _ms(row.step_time_s),
            "own": _ms(row.own_time_s),
            "wait": _share(row.data_wait_share),
            "gpu": "n/a" if row.gpu_busy_percent is None else f"{row.gpu_busy_percent:.0f}%",
            "comm": comm,
        })
    return out


HEADERS = [("rank", "Rank"), ("host", "Host"), ("step", "Step time"), ("own", "Own time"),
           ("wait", "Data wait"), ("gpu", "GPU busy"), ("comm", "Comm share")]


def title(section: RanksSection) -> str:
    text = f"Ranks: {section.recorded} of world size {section.world_size}"
    if section.hosts:
        text += f" on {len(section.hosts)} host(s)"
    return text + " (own time: step time outside backward(), where DDP waits for the slowest rank)"


def terminal_table(report: Report) -> Any:
    """A rich Table, or None for a one-process run."""
    rows = rank_rows(report)
    if not rows or report.ranks is None:
        return None
    from rich.table import Table

    table = Table(title=title(report.ranks), title_justify="left", show_edge=False, pad_edge=False)
    for _, header in HEADERS:
        table.add_column(header)
    for row in rows:
        table.add_row(*(row[key] for key, _ in HEADERS))
    return table


def markdown_lines(report: Report, escape: Any) -> list[str]:
    rows = rank_rows(report)
    if not rows or report.ranks is None:
        return []
    lines = [f"#### {escape(title(report.ranks))}", "", "| " + " | ".join(h for _, h in HEADERS) + " |",
             "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(escape(row[key]) for key, _ in HEADERS) + " |" for row in rows]
    return [*lines, ""]


def html_context(report: Report, chart: Any) -> dict[str, Any]:
    """For the template's ``ranks`` block: title, headers, rows, the worst rank's chart."""
    rows = rank_rows(report)
    section = report.ranks
    if not rows or section is None:
        return {"ranks": None}
    return {"ranks": {"title": title(section), "headers": [h for _, h in HEADERS],
                      "rows": [[row[key] for key, _ in HEADERS] for row in rows],
                      "worst_rank": section.worst_rank,
                      "worst_svg": chart(dict(section.worst_timeline))}}
