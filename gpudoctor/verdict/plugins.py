"""Third-party checks are guests: what they declare and return is checked before it is trusted.

A check plugin (entry point group ``gpudoctor.checks``, see docs/plugins.md) can fail
in three places, and none of them may cost the user the report:

- loading: the entry point does not import, is not a ``gpudoctor.model.Check``, or
  declares fields of the wrong type (``check_problem``); the registry keeps it out and
  the engine shows it as an ``error`` outcome in every report (``load_error_outcomes``);
- running: it raises (even ``SystemExit``); the engine records an ``error`` outcome;
- returning: it hands back something other than a list of ``Finding`` objects whose
  fields have the documented types (``validated_findings`` raises ``PluginOutputError``,
  and the engine records an ``error`` outcome saying what was wrong).

The same rules apply to the built-in checks: they are registered the same way.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from numbers import Real
from typing import TYPE_CHECKING, Any

from gpudoctor.model import STAGES, Check, CheckOutcome, Evidence, Finding, Fix, Remedy
from gpudoctor.thresholds import THRESHOLD_TYPES

if TYPE_CHECKING:
    from gpudoctor.verdict.registry import PluginError

MAX_FINDINGS = 100  # more from one check is a runaway loop, not a diagnosis
ID_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{1,31}$")


class PluginOutputError(Exception):
    """A check returned something the engine cannot use; the message says what."""


def check_problem(check: object) -> str | None:
    """Why this entry point's object cannot be used as a check, or None when it can."""
    if not isinstance(check, Check):
        return f"entry point is {_kind(check)}, not a gpudoctor.model.Check"
    if not isinstance(check.id, str) or not ID_PATTERN.match(check.id):
        return f"check id {check.id!r} is not 2-32 letters, digits, '-' or '_' starting with a letter"
    if not isinstance(check.slug, str) or not check.slug or any(c.isspace() for c in check.slug):
        return f"check {check.id}: slug {check.slug!r} must be a non-empty string without spaces"
    if isinstance(check.stage, bool) or not isinstance(check.stage, int) or check.stage not in STAGES:
        return f"check {check.id}: stage {check.stage!r} is not one of {sorted(STAGES)}"
    if not isinstance(check.title, str) or not check.title.strip():
        return f"check {check.id}: title must be a non-empty string"
    if not callable(check.run):
        return f"check {check.id}: run is {_kind(check.run)}, not a function of a Session"
    for name in ("requires", "explains"):
        value = getattr(check, name)
        if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
            return f"check {check.id}: {name} must be a tuple of strings, not {_kind(value)}"
    if not isinstance(check.doc, str):
        return f"check {check.id}: doc must be a string"
    conditions = check.explains_only_if
    if not isinstance(conditions, Mapping) or not all(isinstance(k, str) and callable(v)
                                                      for k, v in conditions.items()):
        return f"check {check.id}: explains_only_if must map check IDs to functions of a Finding"
    if not isinstance(check.thresholds, (tuple, list)) or not all(isinstance(t, THRESHOLD_TYPES)
                                                                  for t in check.thresholds):
        return f"check {check.id}: thresholds must be a tuple of gpudoctor.thresholds.Threshold"
    if not isinstance(check.measures_idle, bool):
        return f"check {check.id}: measures_idle must be True or False"
    if check.fix is not None and not isinstance(check.fix, Fix):
        return f"check {check.id}: fix must be a gpudoctor.model.Fix, not {_kind(check.fix)}"
    return None


def validated_findings(produced: object) -> list[Finding]:
    """The findings a check returned, once each is proven usable; PluginOutputError otherwise."""
    if isinstance(produced, Finding):
        raise PluginOutputError("returned one Finding, expected a list of Finding")
    if produced is None or isinstance(produced, (str, bytes, dict)) or not isinstance(produced, Iterable):
        raise PluginOutputError(f"returned {_kind(produced)}, expected a list of Finding")
    findings: list[Finding] = []
    for index, item in enumerate(produced):
        if index >= MAX_FINDINGS:
            raise PluginOutputError(f"returned more than {MAX_FINDINGS} findings")
        if not isinstance(item, Finding):
            raise PluginOutputError(f"item {index} is {_kind(item)}, expected a gpudoctor.model.Finding")
        problem = _finding_problem(item)
        if problem:
            raise PluginOutputError(f"finding {index} ({_short(item.title)}): {problem}")
        findings.append(item)
    return findings


def _finding_problem(f: Finding) -> str | None:
    if not isinstance(f.title, str) or not f.title.strip():
        return "title must be a non-empty string"
    if not isinstance(f.message, str):
        return f"message is {_kind(f.message)}, expected a string"
    if not isinstance(f.evidence, dict):
        return f"evidence is {_kind(f.evidence)}, expected a dict of name -> Evidence"
    for key, value in f.evidence.items():
        if not isinstance(key, str) or not isinstance(value, Evidence):
            return f"evidence[{key!r}] is {_kind(value)}, expected a gpudoctor.model.Evidence"
        try:
            json.dumps(value.to_dict(), allow_nan=False)
        except (TypeError, ValueError) as exc:
            return f"evidence[{key!r}] cannot be written as JSON ({exc})"
    remedy = f.remedy
    if remedy is not None and (not isinstance(remedy, Remedy) or not isinstance(remedy.text, str)
                               or not isinstance(remedy.code, (str, type(None)))):
        return f"remedy is {_kind(remedy)}, expected a gpudoctor.model.Remedy(text, code)"
    gain = f.estimated_gain
    if gain is not None and (isinstance(gain, bool) or not isinstance(gain, Real)
                             or not math.isfinite(float(gain)) or float(gain) <= 0):
        return f"estimated_gain {gain!r} must be a positive number or None"
    if f.prediction is not None:
        from gpudoctor.model import Prediction

        if not isinstance(f.prediction, Prediction):
            return f"prediction is {_kind(f.prediction)}, expected None (or a gpudoctor Prediction)"
    if not isinstance(f.ended_run, bool):
        return "ended_run must be True or False"
    if f.consequence_of is not None and not isinstance(f.consequence_of, str):
        return "consequence_of must be None (the engine sets it)"
    return None


def load_error_outcomes(errors: Iterable[PluginError]) -> list[CheckOutcome]:
    """One `error` outcome per plugin that could not be loaded, for every report to show."""
    return [
        CheckOutcome(id=_outcome_id(e.name), slug="plugin", stage=0, title=f"check plugin {e.name}",
                     status="error", reason=f"plugin failed to load: {e.reason}")
        for e in errors
    ]


def _outcome_id(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.:-]+", "_", str(name))[:64]
    return cleaned or "plugin"


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    return f"a {type(value).__module__}.{type(value).__qualname__}".replace("builtins.", "")


def _short(text: Any) -> str:
    value = str(text)
    return value if len(value) <= 60 else value[:57] + "..."
