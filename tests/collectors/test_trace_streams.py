"""Two streams whose kernels overlap: busy is the union of all streams (idle is time with no
activity on any), and each stream's own busy time is reported too."""

from __future__ import annotations

from gpudoctor.collectors.trace import summarize_trace


def _kernel(stream: int, ts: float, dur: float, correlation: int) -> dict:
    return {"ph": "X", "cat": "kernel", "name": f"k{correlation}", "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": correlation}}


def _launch(ts: float, correlation: int) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 5.0,
            "args": {"correlation": correlation}}


# stream 7: [100, 200) and [400, 500); stream 13: [150, 300) and [600, 650)
# union: [100, 300) + [400, 500) + [600, 650) = 350 us busy over [100, 650): 200 us idle
EVENTS = [
    _launch(50, 1), _kernel(7, 100, 100, 1),
    _launch(60, 2), _kernel(13, 150, 150, 2),
    _launch(350, 3), _kernel(7, 400, 100, 3),
    _launch(550, 4), _kernel(13, 600, 50, 4),
]


def test_idle_is_time_with_no_activity_on_any_stream() -> None:
    summary = summarize_trace({"traceEvents": EVENTS})
    assert summary.gpu_busy_us == 350.0
    assert summary.gpu_idle_us == 200.0
    assert summary.kernel_total_us == 400.0  # the kernels' own time counts the overlap twice


def test_each_stream_is_reported() -> None:
    summary = summarize_trace({"traceEvents": EVENTS})
    assert summary.streams == [  # equally busy: by name
        {"stream": "13", "ops": 2, "busy_us": 200.0, "busy_share": round(200 / 550, 4)},
        {"stream": "7", "ops": 2, "busy_us": 200.0, "busy_share": round(200 / 550, 4)},
    ]


def test_one_stream_busier_than_the_other() -> None:
    events = [*EVENTS, _launch(700, 5), _kernel(7, 700, 30, 5)]
    summary = summarize_trace({"traceEvents": events})
    assert [(s["stream"], s["busy_us"], s["ops"]) for s in summary.streams] == [("7", 230.0, 3), ("13", 200.0, 2)]
    assert summary.gpu_busy_us == 380.0


def test_the_html_report_shows_the_streams(tmp_path) -> None:
    from gpudoctor.reports.html import _profile_view

    summary = summarize_trace({"traceEvents": EVENTS})
    import dataclasses

    rows = dict(_profile_view(dataclasses.asdict(summary))["rows"])
    assert rows["Streams (busy time)"] == "13: 200 us (36%); 7: 200 us (36%)"
