"""The preflight policy: thresholds from `[tool.gpudoctor.preflight]` in the nearest
pyproject.toml, or from `--policy FILE` (the same table, or the keys at the top level).

    [tool.gpudoctor.preflight]
    min_sm_activity = 40            # percent, GPM SM activity during the job
    max_data_wait_share = 0.05      # fraction of each step spent waiting for data
    no_critical_findings = true
    max_step_time_ms = 250
    max_peak_memory_share = 0.9
    min_shm_bytes = "8GiB"          # machine items: a threshold set here fails below it
    require_persistence_mode = true
    warnings_fail = ["PF402"]       # or true: every warning fails
    ignore = ["PF404"]

A file that cannot be read, is not TOML, or holds an unknown key or a bad value is a
one-line error (exit code 78), never a silently weaker gate.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gpudoctor.base import exitcodes
from gpudoctor.base.exitcodes import GpudoctorError

UNLIMITED = -1  # min_memlock_bytes = "unlimited"
# a policy is a few dozen lines: a file far larger (a 300 MB comment, /dev/zero) is refused
# unread, and so is a pyproject.toml that large (its table is read only when it names gpudoctor)
MAX_POLICY_BYTES = 1 << 20


@dataclass(frozen=True)
class Policy:
    source: str | None = None  # where it came from (a path relative to the working directory)
    # the job (PF9xx): set only, never defaulted
    min_sm_activity: float | None = None  # percent
    min_gpu_utilization: float | None = None  # percent
    max_data_wait_share: float | None = None  # fraction
    no_critical_findings: bool = False
    min_samples_per_s: float | None = None
    min_steps_per_s: float | None = None
    max_step_time_ms: float | None = None
    max_peak_memory_share: float | None = None  # fraction
    # machine items: set here, a threshold turns the item's warning into a failure
    min_shm_bytes: int | None = None
    min_free_disk_bytes: int | None = None
    min_memlock_bytes: int | None = None  # UNLIMITED: must be unlimited
    max_swap_used_bytes: int | None = None
    min_open_files: int | None = None
    min_cores_per_gpu: float | None = None
    min_power_limit_share: float | None = None  # enforced / default power limit
    require_persistence_mode: bool = False
    require_performance_governor: bool = False
    # how results count
    warnings_fail: bool | tuple[str, ...] = False  # True, or the items (IDs or slugs) whose warnings fail
    not_checked_fails: bool | tuple[str, ...] = False
    ignore: tuple[str, ...] = ()

    def values(self) -> dict[str, Any]:
        """The keys the policy set (for the report)."""
        default = Policy()
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)
                if f.name != "source" and getattr(self, f.name) != getattr(default, f.name)}

    def escalates(self, kind: str, item_id: str, slug: str) -> bool:
        """Does a `warn` (kind="warnings_fail") or `not-checked` result of this item fail?"""
        rule = getattr(self, kind)
        if isinstance(rule, bool):
            return rule
        return any(name.upper() == item_id or name.lower() == slug for name in rule)

    @property
    def job_keys(self) -> list[str]:
        return [k for k in JOB_KEYS if getattr(self, k) not in (None, False)]


JOB_KEYS = ("min_sm_activity", "min_gpu_utilization", "max_data_wait_share", "no_critical_findings",
            "min_samples_per_s", "min_steps_per_s", "max_step_time_ms", "max_peak_memory_share")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_bytes(value: Any) -> int:
    """4294967296, "4GiB", "4G" (=4e9), "512MiB", "64m"."""
    if isinstance(value, bool):
        raise ValueError("expected a size, not true/false")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 8GiB or 512MiB, got {value!r}")
    unit = (match.group(2) or "").lower().rstrip("b")
    return int(float(match.group(1)) * _UNITS[unit])


def _number(low: float | None = None, high: float | None = None) -> Any:
    def convert(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"expected a number, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(
                f"must be between {low:g} and {high:g}" if high is not None else f"must be at least {low:g}"
            )
        return float(value)

    return convert


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _names(value: Any) -> tuple[str, ...]:
    from gpudoctor.preflight.items import find

    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of item IDs or slugs")
    unknown = [v for v in value if find(v) is None]
    if unknown:
        raise ValueError(f"no preflight item {unknown[0]!r} (see `gpudoctor preflight --list`)")
    return tuple(value)


def _flag_or_names(value: Any) -> bool | tuple[str, ...]:
    return value if isinstance(value, bool) else _names(value)


def _memlock(value: Any) -> int:
    return UNLIMITED if value in ("unlimited", -1) else parse_bytes(value)


CONVERTERS = {
    "min_sm_activity": _number(0, 100),
    "min_gpu_utilization": _number(0, 100),
    "max_data_wait_share": _number(0, 1),
    "no_critical_findings": _flag,
    "min_samples_per_s": _number(0),
    "min_steps_per_s": _number(0),
    "max_step_time_ms": _number(0),
    "max_peak_memory_share": _number(0, 1),
    "min_shm_bytes": parse_bytes,
    "min_free_disk_bytes": parse_bytes,
    "min_memlock_bytes": _memlock,
    "max_swap_used_bytes": parse_bytes,
    "min_open_files": _count,
    "min_cores_per_gpu": _number(0),
    "min_power_limit_share": _number(0, 1),
    "require_persistence_mode": _flag,
    "require_performance_governor": _flag,
    "warnings_fail": _flag_or_names,
    "not_checked_fails": _flag_or_names,
    "ignore": _names,
}


def bad_policy(message: str) -> GpudoctorError:
    return GpudoctorError(message, exitcodes.BAD_POLICY)


def from_table(table: Any, source: str) -> Policy:
    if not isinstance(table, dict):
        raise bad_policy(f"{source}: the preflight policy must be a table of keys")
    values: dict[str, Any] = {}
    for key, raw in table.items():
        convert = CONVERTERS.get(key)
        if convert is None:
            raise bad_policy(f"{source}: unknown policy key {key!r} (known: {', '.join(CONVERTERS)})")
        try:
            values[key] = convert(raw)
        except ValueError as exc:
            raise bad_policy(f"{source}: {key}: {exc}") from None
    return Policy(source=source, **values)


def _toml() -> Any:
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        try:
            import tomli as tomllib  # type: ignore[no-redef, unused-ignore]
        except ImportError:
            return None
    return tomllib


def _parse(path: Path, label: str) -> dict[str, Any]:
    toml = _toml()
    if toml is None:
        raise bad_policy(f"{label}: reading a policy needs Python 3.11+ (tomllib) or the tomli package")
    text = _read_small(path, label)
    try:
        return toml.loads(text)  # type: ignore[no-any-return]
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise bad_policy(f"{label}: not valid TOML: {exc}") from None
    except RecursionError:
        raise bad_policy(f"{label}: not a policy: arrays or tables nested too deeply") from None


def _read_small(path: Path, label: str) -> str:
    """The file's text, read no further than MAX_POLICY_BYTES (a device or a huge file never fills memory)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise bad_policy(f"{label}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_POLICY_BYTES:
        raise bad_policy(f"{label}: larger than {MAX_POLICY_BYTES >> 20} MiB: not a policy file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_policy(f"{label}: not valid TOML: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _table(data: dict[str, Any]) -> Any:
    tool = data.get("tool")
    return (
        tool.get("gpudoctor", {}).get("preflight")
        if isinstance(tool, dict) and isinstance(tool.get("gpudoctor"), dict)
        else None
    )


def load(policy_file: str | None, cwd: Path | None = None) -> Policy:
    """`--policy FILE` when given, else the nearest pyproject.toml's table, else no policy."""
    cwd = cwd or Path.cwd()
    if policy_file is not None:
        path = Path(policy_file)
        if path.is_dir():
            raise bad_policy(f"--policy {policy_file}: a directory, not a TOML file")
        data = _parse(path, policy_file)
        table = _table(data)
        if table is None and "tool" in data:
            raise bad_policy(f"{policy_file}: no [tool.gpudoctor.preflight] table")
        return from_table(data if table is None else table, policy_file)
    pyproject = nearest_pyproject(cwd)
    if pyproject is None:
        return Policy()
    label = _relative(pyproject, cwd)
    try:
        with open(pyproject, "rb") as fh:
            head = fh.read(MAX_POLICY_BYTES + 1)
    except OSError:
        return Policy()
    if b"gpudoctor" not in head:  # not ours: never fail on another tool's file
        return Policy()
    table = _table(_parse(pyproject, label))
    return Policy() if table is None else from_table(table, f"{label} [tool.gpudoctor.preflight]")


def nearest_pyproject(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _relative(path: Path, cwd: Path) -> str:
    try:
        return os.path.relpath(path, cwd)
    except ValueError:  # another drive (Windows)
        return str(path)
