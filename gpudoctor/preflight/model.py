"""The vocabulary of preflight: item specs (the catalog), item results, statuses.

An item's result is data whatever happened: a value that could not be read is a
`not-checked` result with the reason, never a pass and never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS, WARN, FAIL, NOT_CHECKED = "pass", "warn", "fail", "not-checked"
STATUSES = (PASS, WARN, FAIL, NOT_CHECKED)
_RANK = {PASS: 0, NOT_CHECKED: 1, WARN: 2, FAIL: 3}

GROUPS = {
    "gpu": "Driver and GPUs",
    "health": "GPU health",
    "links": "Links and placement",
    "host": "Host",
    "env": "Environment",
    "job": "Job (policy)",
}


def worst(statuses: list[str]) -> str:
    """The most severe status of several (fail > warn > not-checked > pass); pass when empty."""
    return max(statuses, key=lambda s: _RANK[s], default=PASS)


@dataclass(frozen=True)
class ItemSpec:
    """One checklist item as the catalog describes it (the same on every machine)."""

    id: str  # PF403: stable, never reused
    slug: str  # shm-size: readable, accepted by --ignore too
    group: str  # a key of GROUPS
    title: str  # what a pass means, e.g. "/dev/shm is large enough for DataLoader workers"
    why: str  # why it matters for GPU utilization
    fix: str  # how to fix it, in a sentence or two
    source: str  # where the threshold comes from (documentation, a measured fact, or gpudoctor's choice)
    fix_code: str | None = None  # a copyable command or snippet


@dataclass(frozen=True)
class ItemResult:
    """What one item found on this machine."""

    id: str
    status: str  # pass | warn | fail | not-checked
    found: str  # what was measured, with numbers
    expected: str  # what would pass
    reason: str | None = None  # not-checked: why it could not be read
    fix_code: str | None = None  # a command specific to this machine (overrides the spec's)
    values: dict[str, Any] = field(default_factory=dict)  # measured values for machines (JSON)
    note: str | None = None  # e.g. "policy: warnings fail"

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")


def not_checked(item_id: str, reason: str, expected: str = "", **values: Any) -> ItemResult:
    return ItemResult(item_id, NOT_CHECKED, found="not checked", expected=expected, reason=reason, values=values)


class Unread:
    """A value NVML, sysfs or the OS would not give, with the reason (falsy, never zero)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Unread({self.reason!r})"


def unread_reason(*values: Any) -> str | None:
    """The reason of the first Unread among values, None when all were read."""
    return next((v.reason for v in values if isinstance(v, Unread)), None)
