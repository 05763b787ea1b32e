"""The report's per-rank part (a distributed job): the JSON `ranks` section and its views.

Kept in one module so that every renderer's rank table comes from one place. The JSON
section is built from the Session by `gpudoctor.analysis.ranks.ranks_section` (renderers
read only the Report); `rank_rows` formats it for
the terminal (`terminal_table`), markdown (`markdown_lines`) and HTML (`html_context`,
rendered by the ``ranks`` block of templates/report.html).
"""

from __future__ import annotations

from typing import Any

from gpudoctor.verdict.report_model import RanksSection, Report


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
