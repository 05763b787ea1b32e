"""The engine: run the checks on a Session, order findings the way an expert triages.

Ordering: what ended the run first, then root causes before their consequences,
problems before notes, then the predicted gain (the step time now over the step
time without the cause, gpudoctor.analysis.prediction; a trial's measured gain
where --try measured none), the playbook stage breaking near-ties (within 10%,
gpudoctor.verdict.gains): the verdict names the cause with the largest gain.

A finding is a consequence of another when removing that other cause removes
it. Where the profiled window was replayed, the replay decides: a cause whose
extra gain, once the other is fixed, is under 1.05x is explained by it (the one
with the larger gain of the two is the root); the idle GPU (a check that declares
``measures_idle``, GD201) is explained by a cause whose removal takes away at least
half of the window's idle time.
Where no replay can tell (memory, batch size, clocks, runs without a window),
each check declares what its findings explain (``Check.explains``), unless the
finding predicts clearly more than its declared cause does (beyond a near-tie):
removing a cause that buys 1.2x cannot remove one that predicts 1.8x. A
consequence is kept, marked, never shouted as a second root cause.

One number per remedy: findings whose remedies make the same change (GD101 and GD102
both add workers) show the best-founded prediction of it, the others' as cross-checks.

One remedy per setting: findings that advise opposite ways on one knob (``Remedy.knobs``:
"set num_workers=4" against "do not add workers") are reconciled before rendering. The
check that sizes that knob from the run's measurements (``Check.owns``: GD101 for the
workers) prevails, else the finding with the larger predicted gain; the others keep their
diagnosis and advise without that knob (``Remedy.without_knobs``).

A check is a guest when it is not a built-in (a plugin): it runs on a copy of the
Session (what it changes there changes nothing reported), in a thread of its own, for at
most PLUGIN_TIME_LIMIT_S; whatever it raises, KeyboardInterrupt and other BaseExceptions
included, is its `error` outcome. A Ctrl-C while the checks run stops the judging: the
checks judged so far are reported, the others are skipped saying so.

When the GPU was fully used (gpudoctor.analysis.gpu_state), no finding is
critical: the GPU works, and what remains is making the work itself cheaper.
Nor from fewer than 10 steady steps (metrics.MIN_STEADY_STEPS): the verdict says
how few, and the gains stand as estimates.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor.analysis.shared import Analyses, shared_for
from gpudoctor.model import Check, CheckOutcome, Finding, Remedy, Skip, severity_rank
from gpudoctor.session import Session
from gpudoctor.verdict.gains import by_gain, clearly_larger, gain_of, measured_over_predicted, one_number_per_remedy
from gpudoctor.verdict.plugins import PluginOutputError, load_error_outcomes, validated_findings

if TYPE_CHECKING:
    from gpudoctor.session import ReplayScenario
    from gpudoctor.verdict.registry import PluginError

log = logging.getLogger(__name__)

MARGINAL_GAIN = 1.05  # what a second fix must still buy, once the first is made, to stand on its own
IDLE_EXPLAINED = 0.5  # share of the GPU's idle time a cause must remove to explain the idle GPU
PLUGIN_TIME_LIMIT_S = 30.0  # a plugin still running after this is left behind (its result ignored)
BUILTIN_PREFIX = "gpudoctor.checks."


@dataclass(frozen=True)
class EngineResult:
    findings: list[Finding]
    outcomes: list[CheckOutcome]


def run_checks(session: Session, checks: Iterable[Check], ignore: Iterable[str] = (),
               load_errors: Iterable[PluginError] = ()) -> EngineResult:
    """`load_errors` (plugins that did not load) become `error` outcomes, shown in every report."""
    with shared_for(session) as shared:  # each stage analysis once, whichever checks read it
        return _run_checks(session, list(checks), ignore, load_errors, shared)


def _run_checks(session: Session, checks: list[Check], ignore: Iterable[str],
                load_errors: Iterable[PluginError], shared: Analyses) -> EngineResult:
    ignored = {i.strip().upper() for i in ignore}
    findings: list[Finding] = []
    outcomes: list[CheckOutcome] = []
    for n, check in enumerate(checks):
        try:
            outcome, produced = _run_one(session, check, ignored)
        except KeyboardInterrupt:  # Ctrl-C while judging: what was judged is still reported
            log.warning("gpudoctor: interrupted while judging; reporting the checks judged so far")
            outcomes.append(_outcome(check, "error", "interrupted (Ctrl-C) while it ran"))
            outcomes.extend(_outcome(c, "skipped", "not run: the judging was interrupted (Ctrl-C)")
                            for c in checks[n + 1:])
            break
        outcomes.append(outcome)
        findings.extend(produced)
    outcomes.extend(load_error_outcomes(load_errors))
    by_id = {c.id: c for c in checks}
    findings = one_number_per_remedy(reconcile(_cap_severity(session, findings, shared), by_id), by_id)
    findings = measured_over_predicted(findings, session.trials)
    return EngineResult(findings=order(findings, session, by_id), outcomes=outcomes)


def with_trials(result: EngineResult, session: Session, checks: Iterable[Check] | None = None) -> EngineResult:
    """The result once `session.trials` measured the remedies (--try ran after the judging):
    a finding whose remedy measured no gain is demoted, and the order follows."""
    if session.trials is None:
        return result
    by_id = {c.id: c for c in checks} if checks is not None else None
    findings = measured_over_predicted(result.findings, session.trials)
    return EngineResult(findings=order(findings, session, by_id), outcomes=result.outcomes)


def reconcile(findings: list[Finding], checks: Mapping[str, Check]) -> list[Finding]:
    """Never opposite advice on one knob: the owner's (else the larger gain's) stands."""
    advised: dict[str, list[Finding]] = {}
    for f in findings:
        for knob in f.remedy.knobs if f.remedy is not None else ():
            advised.setdefault(knob, []).append(f)
    replaced: dict[int, Finding] = {}
    for knob, group in advised.items():
        if len({_way(f, knob) for f in group}) < 2:
            continue
        owners = [f for f in group if knob in getattr(checks.get(f.id), "owns", ())]
        leader = max(owners or group, key=lambda f: (severity_rank(f.severity), _gain(f)))
        for f in group:
            if _way(f, knob) == _way(leader, knob):
                continue
            current = replaced.get(id(f), f)
            assert current.remedy is not None and leader.remedy is not None  # both advise on the knob
            instead = current.remedy.without_knobs or Remedy(text=f"On {knob}: {leader.remedy.text}",
                                                             code=leader.remedy.code)
            if instead.fix is None:  # how the trials apply it stays the finding's own
                instead = dataclasses.replace(instead, fix=current.remedy.fix)
            note = f" (Its advice on {knob} gave way to {leader.id}'s: one remedy per setting.)"
            replaced[id(f)] = dataclasses.replace(current, remedy=instead, message=current.message + note)
    return [replaced.get(id(f), f) for f in findings]


def _way(f: Finding, knob: str) -> str | None:
    return f.remedy.knobs.get(knob) if f.remedy is not None else None


def _outcome(check: Check, status: str, reason: str | None = None) -> CheckOutcome:
    return CheckOutcome(id=check.id, slug=check.slug, stage=check.stage, title=check.title, status=status,
                        reason=reason)


class GuestFailed(Exception):
    """A plugin raised (anything, a BaseException too) or ran past its time; str() says what."""


def is_builtin(check: Check) -> bool:
    return str(getattr(check.run, "__module__", "")).startswith(BUILTIN_PREFIX)


def _call(check: Check, session: Session) -> object:
    """The check's result: a built-in's directly, a guest's from its own thread and copy."""
    if is_builtin(check):
        return check.run(session)
    view = copy.deepcopy(session)
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["result"] = check.run(view)
        except BaseException as exc:  # noqa: BLE001  (a guest's every exception is its own error)
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"gpudoctor-check-{check.id}", daemon=True)
    thread.start()
    thread.join(PLUGIN_TIME_LIMIT_S)  # a Ctrl-C interrupts the wait, not the report
    if thread.is_alive():
        raise GuestFailed(f"did not finish within {PLUGIN_TIME_LIMIT_S:g} s (left running, its result ignored)")
    error = box.get("error")
    if isinstance(error, (Skip, PluginOutputError)):
        raise error
    if isinstance(error, BaseException):
        raise GuestFailed(f"{type(error).__name__}: {error}")
    return box.get("result")


def _run_one(session: Session, check: Check, ignored: set[str]) -> tuple[CheckOutcome, list[Finding]]:
    """One check's outcome and its findings (stamped with its ID and stage)."""

    decides = check.decides if not check.decides_on_gpu_runs or session.torch_cuda_used else None

    def outcome(status: str, reason: str | None = None) -> CheckOutcome:
        return CheckOutcome(id=check.id, slug=check.slug, stage=check.stage, title=check.title, status=status,
                            reason=reason, decides=decides)

    if check.id.upper() in ignored or check.slug.upper() in ignored:  # the user's choice: not an unknown
        return dataclasses.replace(outcome("skipped", "ignored (--ignore)"), decides=None), []
    missing = [(fact, session.fact(fact)) for fact in check.requires if session.fact(fact)]
    if missing:
        fact, reason = missing[0]
        return outcome("skipped", f"{fact}: {reason}"), []
    try:
        produced = validated_findings(_call(check, session))
        stamped = [dataclasses.replace(f, id=check.id, stage=check.stage) for f in produced]
    except Skip as skip:
        return outcome("skipped", str(skip)), []
    except PluginOutputError as exc:  # garbage from a (third-party) check: said, never fatal
        log.warning("check %s returned an unusable result: %s", check.id, exc)
        return outcome("error", f"check returned an unusable result: {exc}"), []
    except GuestFailed as exc:
        log.warning("check %s failed: %s", check.id, exc)
        return outcome("error", f"check failed: {exc}"), []
    except KeyboardInterrupt:
        raise  # a Ctrl-C (a built-in runs in this thread): the caller reports what was judged
    except BaseException as exc:  # a broken check is reported, never fatal
        log.exception("check %s failed", check.id)
        return outcome("error", f"check failed: {type(exc).__name__}: {exc}"), []
    return outcome("finding" if stamped else "pass"), stamped


def _cap_severity(session: Session, findings: list[Finding], shared: Analyses) -> list[Finding]:
    """No critical finding while the GPU is fully used, or from too few steady steps to be sure."""
    from gpudoctor import metrics

    steady = metrics.steady_step_count(session)
    few = session.steps.source is not None and 0 < steady < metrics.MIN_STEADY_STEPS
    if shared.fully_used is None and not few:
        return findings
    return [dataclasses.replace(f, severity="warning")
            if f.severity == "critical" and not f.ended_run and f.stage > 0 else f for f in findings]


def _gain(f: Finding) -> float:
    return gain_of(f)


def order(findings: list[Finding], session: Session | None = None,
          checks: Mapping[str, Check] | None = None) -> list[Finding]:
    """`checks` (by ID) say what explains what where no replay can tell; all installed ones by default."""
    if checks is None:
        checks = _declared()
    roots = sorted((f for f in findings if severity_rank(f.severity) >= severity_rank("warning")),
                   key=lambda f: -_gain(f))
    relation = _Relation(session, checks, roots)
    marked = []
    for f in findings:
        causes = [r for r in roots if r.id != f.id and relation.explains(r, f)]
        # name a root cause over a root that is itself a consequence (GD105 -> GD103 -> GD201)
        causes.sort(key=lambda r: any(relation.explains(o, r) for o in roots if o.id != r.id))
        if causes and f.consequence_of is None:
            f = dataclasses.replace(f, consequence_of=causes[0].id)
        marked.append(f)

    def group(f: Finding) -> tuple[bool, bool, bool]:
        # the run's end first, then root causes before consequences and problems before notes
        return (f.consequence_of is not None, f.severity == "info", not f.ended_run)

    # within a group the largest gain leads (the trial's where one measured it); the stage breaks near-ties.
    # A symptom's number (GD201's 1 / duty cycle) is a bound, not a remedy's: it follows the remedies
    symptoms = {f.id for f in marked if _is_symptom(f, checks)}
    return [f for key in sorted({group(f) for f in marked})
            for f in by_gain((g for g in marked if group(g) == key), last=symptoms)]


def _is_symptom(f: Finding, checks: Mapping[str, Check]) -> bool:
    """Its check measures the GPU's idle time itself (Check.measures_idle): what it predicts is the
    bound "if the GPU never idled", which no one change buys."""
    declared = checks.get(f.id)
    return declared is not None and declared.measures_idle


class _Relation:
    """Does root finding A explain finding B? The replay where it can tell, else the declarations."""

    def __init__(self, session: Session | None, checks: Mapping[str, Check], roots: Iterable[Finding] = ()) -> None:
        from gpudoctor.analysis.prediction import replay_of

        self.replay = replay_of(session) if session is not None else None
        self.checks = checks
        self.roots = list(roots)

    def explains(self, root: Finding, finding: Finding) -> bool:
        told = self._replayed(root, finding)
        if told is not None:
            return told
        declared = self.checks.get(root.id)
        if declared is None or finding.id not in declared.explains or clearly_larger(finding, root):
            return False
        condition = declared.explains_only_if.get(finding.id)
        return condition is None or bool(condition(finding))

    def _replayed(self, root: Finding, finding: Finding) -> bool | None:
        replay = self.replay
        cause = _scenario(root)
        if replay is None or cause is None:
            return None
        spans = {s.name: s for s in replay.scenarios}
        if cause not in spans:
            return None
        symptom = self.checks.get(finding.id)
        if symptom is not None and symptom.measures_idle:
            return self._explains_idle(root, cause, spans)
        other = _scenario(finding)
        if other is None or other not in spans or other == cause:
            return None
        both = replay.combined.get(f"{cause}+{other}") or replay.combined.get(f"{other}+{cause}")
        if both is None or both <= 0:
            return None
        marginal = replay.loop_us(spans[cause].span_us) / replay.loop_us(both)
        return marginal < MARGINAL_GAIN and _gain(root) >= _gain(finding)


    def _explains_idle(self, root: Finding, cause: str, spans: Mapping[str, ReplayScenario]) -> bool:
        """Does removing `cause` take away at least half of the GPU's idle time: alone, or together
        with another replayed root cause for which `root` is the larger gain of the two (causes that
        each leave the GPU idle, in series in the step: per-parameter optimizer kernels and the
        model's launches)?"""
        replay = self.replay
        assert replay is not None
        # the idle GPU is about the SMs: time without a kernel (copies keep the copy engines busy, not the SMs)
        kernels = replay.baseline_kernel_busy_us is not None and all(
            s.kernel_busy_us is not None for s in spans.values())
        busy_now = replay.baseline_kernel_busy_us if kernels else replay.baseline_gpu_busy_us

        def busy(name: str) -> float:
            scenario = spans[name]
            return (scenario.kernel_busy_us if kernels else scenario.gpu_busy_us) or 0.0

        # over the loop's time: the time the window's steps do not stand for idles the GPU in every what-if
        idle_now = replay.loop_us(replay.baseline_span_us or 0.0) - (busy_now or 0.0)
        if idle_now <= 0:
            return False
        if replay.loop_us(spans[cause].span_us) - busy(cause) <= IDLE_EXPLAINED * idle_now:
            return True
        for other in self.roots:
            partner = _scenario(other)
            if other.id == root.id or partner is None or partner == cause or partner not in spans:
                continue
            both = replay.combined.get(f"{cause}+{partner}") or replay.combined.get(f"{partner}+{cause}")
            if both is None or both <= 0 or _gain(other) > _gain(root):
                continue
            if replay.loop_us(both) - min(busy(cause), busy(partner)) <= IDLE_EXPLAINED * idle_now:
                return True
        return False


def _scenario(f: Finding) -> str | None:
    prediction = f.prediction
    return prediction.scenario if prediction is not None and prediction.method != "rule" else None


def _declared() -> dict[str, Check]:
    """The installed checks by ID, for what each declares it explains."""
    from gpudoctor.verdict.registry import checks_by_id

    return checks_by_id()


def gate_line(findings: list[Finding], fail_on: str | None, measured: bool = True) -> str:
    """The one line saying why --fail-on failed the run: the findings at or above its level
    (most important first), or that nothing steady was measured."""
    if not fail_on:
        return ""
    threshold = severity_rank(fail_on)
    failing = [f for f in findings if severity_rank(f.severity) >= threshold]
    if not failing:
        return "" if measured else (f"gpudoctor: --fail-on {fail_on} failed: nothing steady was measured, and a "
                                    "gate does not pass on no evidence")
    named = ", ".join(f"{f.id} ({f.severity})" for f in failing[:6]) + (" ..." if len(failing) > 6 else "")
    return f"gpudoctor: --fail-on {fail_on} failed: {len(failing)} finding(s) at {fail_on} or above: {named}"


def exit_status(workload_exit: int | None, findings: list[Finding], fail_on: str | None,
                measured: bool = True) -> int:
    """gpudoctor's exit code: the workload's, unless --fail-on trips on a clean run. A run
    that measured nothing steady trips --fail-on too: a gate must not pass on no evidence."""
    from gpudoctor.base import exitcodes

    code = workload_exit if workload_exit is not None else exitcodes.WORKLOAD_UNKNOWN
    if code == 0 and fail_on:
        threshold = severity_rank(fail_on)
        if not measured or any(severity_rank(f.severity) >= threshold for f in findings):
            return exitcodes.FAIL_ON
    return code
