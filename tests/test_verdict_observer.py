"""A slowdown gpudoctor's own windows caused (GD002) heads the verdict as what it is, not as a
failed run (a torchrun job under load headlined "Run failed: the run slowed down ...")."""

from gpudoctor.model import Finding
from gpudoctor.verdict.build import verdict


def _finding(check_id: str, title: str) -> Finding:
    return Finding("warning", title, "measured", id=check_id, stage=0)


def test_an_observer_effect_is_not_a_failed_run() -> None:
    head = verdict([_finding("GD002", "the run slowed down after the profiler window")],
                   {"measured": True, "data_wait_share": 0.03})
    assert head.startswith("Measurement disturbed the run: "), head


def test_a_failed_run_still_says_so() -> None:
    head = verdict([_finding("GD001", "the run crashed")], {"measured": True})
    assert head.startswith("Run failed: "), head
