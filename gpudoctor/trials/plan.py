"""Which remedies a `--try` run re-runs the workload with, from this run's findings.

One trial per distinct override: the input checks all asking for the same worker
count share one run. Each check declares its remedy (``Check.fix``: the remedy kind,
or why none applies from outside the code); a finding whose advice differs carries
its own (``Remedy.fix``). A finding whose remedy needs a code change (syncs, batch
size, copies the code makes itself) is listed as untried, with why.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gpudoctor import metrics
from gpudoctor.analysis.input_pipeline import DEEPER_PREFETCH, worker_plan
from gpudoctor.analysis.shared import analyses
from gpudoctor.model import Check, Finding, Fix
from gpudoctor.session import LoaderInfo, Session
from gpudoctor.trials.records import Untried
from gpudoctor.trials.remedies import DEFAULT_PREFETCH, KINDS, TryRequest, alloc_conf_env, label
from gpudoctor.verdict import registry

CONV_KERNEL = re.compile(r"conv|fprop|dgrad|wgrad|winograd|implicit_gemm|cudnn", re.IGNORECASE)
NO_FIX = "no remedy gpudoctor can apply from outside the code is known for this check"


@dataclass
class TrialPlan:
    name: str  # the remedy kind (remedies.KINDS)
    override: dict[str, Any]  # the agent's "overrides" config; "env" also goes to the environment
    findings: list[str] = field(default_factory=list)
    predicted_gain: float | None = None

    @property
    def label(self) -> str:
        return label(self.override)

    @property
    def numerics_change(self) -> bool:
        return KINDS[self.name].numerics_change


class _Planner:
    def __init__(self, session: Session, findings: list[Finding], request: TryRequest,
                 checks: Mapping[str, Check]) -> None:
        self.session = session
        self.checks = checks
        self.findings = findings
        self.request = request
        self.plans: list[TrialPlan] = []
        self.untried: list[Untried] = []
        self.crashed = session.exit_code not in (0, None) and session.stop_reason not in ("duration", "steps")

    def add(self, name: str, override: dict[str, Any], finding: Finding | None) -> None:
        predicted = _predicted(finding, override) if finding is not None else None
        for plan in self.plans:
            if plan.override == override:
                if finding is not None and finding.id not in plan.findings:
                    if self._sizes(finding, name):  # its prediction is this remedy's own
                        plan.findings.insert(0, finding.id)
                        plan.predicted_gain = predicted
                    else:
                        plan.findings.append(finding.id)
                        if plan.predicted_gain is None:
                            plan.predicted_gain = predicted
                return
        self.plans.append(TrialPlan(name, override, [finding.id] if finding else [], predicted))

    def skip(self, subject: str, why: str) -> None:
        if not any(u.subject == subject for u in self.untried):
            self.untried.append(Untried(subject, why))

    def opt_in(self, finding: Finding, name: str, override: dict[str, Any]) -> None:
        if self.request.wants(name):
            self.add(name, override, finding)
        elif self.request.auto:
            self.skip(finding.id, f"its remedy ({KINDS[name].what}) changes numerics and is opt-in: "
                                  f"--try-only auto,{name}")

    # -- per finding: what its check declares (Check.fix), or the finding itself (Remedy.fix) --
    def fix(self, f: Finding) -> Fix | None:
        own = f.remedy.fix if f.remedy is not None else None
        declared = self.checks.get(f.id)
        return own if own is not None else declared.fix if declared is not None else None

    def _sizes(self, f: Finding, name: str) -> bool:
        fix = self.fix(f)
        return fix is not None and fix.sizes and fix.kind == name

    def finding(self, f: Finding) -> None:
        fix = self.fix(f)
        if self.crashed and not (fix is not None and fix.after_crash):
            return self.skip(f.id, f"the run crashed (exit code {self.session.exit_code}): a trial would measure "
                                   "the crash again; fix it first")
        if f.severity != "info":
            return self._remedy_for(f)
        if self._in_process_note(f):
            # batches made in the loop are host work in series with the step: whether moving them to
            # workers pays is cheaper to measure than to trust a note's prediction
            return self._workers(f, None, note=True)
        # a note is tried only with a remedy named in --try-only (without auto): a run is not
        # worth a prediction under 1.05x
        named = {} if self.request.auto else self.request.named
        request, self.request = self.request, TryRequest(auto=False, named=named)
        try:
            self._remedy_for(f)
        finally:
            self.request = request
        if not any(f.id in plan.findings for plan in self.plans):
            self.untried = [u for u in self.untried if u.subject != f.id]
            self.skip(f.id, "a note, not a problem: not worth a run (name its remedy in --try-only to try it)")

    def _remedy_for(self, f: Finding) -> None:
        fix = self.fix(f)
        if fix is None or fix.kind is None:
            return self.skip(f.id, fix.untried if fix is not None and fix.untried else NO_FIX)
        handler = self.by_kind.get(fix.kind)
        if handler is not None:
            return handler(self, f)
        kind = KINDS.get(fix.kind)
        if kind is None or kind.override is None:
            return self.skip(f.id, f"its remedy {fix.kind!r} is not a remedy --try knows")
        self.opt_in(f, kind.name, copy.deepcopy(dict(kind.override)))

    # -- per remedy kind whose override depends on the run (the others declare theirs: RemedyKind.override)
    def _workers_for(self, f: Finding) -> None:
        evidence = f.evidence.get("recommended_workers")  # the count the finding sized, if it did
        self._workers(f, int(evidence.value) if evidence is not None and evidence.value is not None else None)

    def _in_process_note(self, f: Finding) -> bool:
        """A data finding rated a note on a loader that makes its batches in the main process."""
        loader = metrics.main_loader(self.session)
        declared = self.checks.get(f.id)
        kind = declared.fix.kind if declared is not None and declared.fix is not None else None
        return (self.request.auto and kind == "workers" and loader is not None
                and loader.num_workers == 0 and not loader.iterable)

    def _workers(self, f: Finding, count: int | None, note: bool = False) -> None:
        if not self.request.wants("workers"):
            return None
        loader = metrics.main_loader(self.session)
        if loader is None:
            return self.skip(f.id, "no DataLoader produced a batch")
        if loader.iterable:
            return self.skip(f.id, "an IterableDataset decides how it splits across workers: set num_workers in "
                                   "the code, sharding the stream with get_worker_info()")
        found = analyses(self.session).input_stall
        plan = worker_plan(self.session, loader, found) if found is not None else None
        if count is None and plan is not None:
            count = plan.recommended
        if count is None and note and plan is not None and not plan.handoff_bound:
            # the note predicted too little to size the workers: as many as the load needs, within the cores
            count = min(plan.needed, plan.cap) if plan.needed and plan.cap else plan.cap or plan.needed
        explicit = self.request.named.get("workers")
        if explicit is not None:
            count = int(explicit)
        if count is None:
            why = plan.why_not if plan is not None and plan.why_not else "no worker count would help here"
            return self.skip(f.id, f"{why}; the batches must get cheaper in the code")
        deeper = found is not None and found.stall.kind in ("waiting", "mixed")
        self.add("workers", _loader_override(loader, count, deeper), f)

    def _pin_memory(self, f: Finding) -> None:
        unpinned = [lo for lo in self.session.loaders if lo.pin_memory is False and lo.batches > 0]
        if not unpinned:
            return self.skip(f.id, "the pageable copies come from host tensors the code makes itself (no DataLoader "
                                   "to pin): pin them once in the code and copy with non_blocking=True")
        if self.request.wants("pin_memory"):
            self.add("pin_memory", {"loader": {"pin_memory": True}}, f)

    def _compile(self, f: Finding) -> None:
        self.opt_in(f, "compile", self._compile_spec())

    def _expandable_segments(self, f: Finding) -> None:
        if _evidence(f, "cause") == "capacity":  # an out-of-memory finding's measured cause
            return self.skip(f.id, "the working set does not fit: shrink it in the code (batch, autocast, "
                                   "activation checkpointing)")
        cause = next((g for g in self.findings if g.id == f.consequence_of), None)
        if cause is not None and _evidence(cause, "cause") == "capacity":
            return self.skip(f.id, f"consequence of {cause.id}: the working set does not fit, whatever the "
                                   "allocator does")
        on = f.evidence.get("expandable_segments")
        if on is not None and on.value is True:
            return self.skip(f.id, "expandable_segments is already on: the remaining fix is in the code")
        if self.request.wants("expandable_segments"):
            self.add("expandable_segments", {"env": alloc_conf_env()}, f)

    by_kind: ClassVar[dict[str, Callable[[_Planner, Finding], None]]] = {
        "workers": _workers_for, "pin_memory": _pin_memory, "compile": _compile,
        "expandable_segments": _expandable_segments,
    }

    # -- remedies asked for by name, whatever the findings -----------------------------
    def named(self) -> None:
        """Remedies named without `auto` run even when no finding asked for them; with `auto`
        (--try-only auto,compile) a name only widens what the findings may use."""
        if self.request.auto:
            return
        named = self.request.named
        if "workers" in named and not any(p.name == "workers" for p in self.plans):
            loader = metrics.main_loader(self.session)
            if loader is None or named["workers"] is None:
                self.skip("workers", "no DataLoader produced a batch" if loader is None else
                          "no worker count was computed for this run: give one, e.g. --try-only workers=4")
            else:
                self.add("workers", _loader_override(loader, int(named["workers"]), False), None)
        if "pin_memory" in named and not any(p.name == "pin_memory" for p in self.plans):
            self.add("pin_memory", {"loader": {"pin_memory": True}}, None)
        if "persistent_workers" in named:
            self.add("persistent_workers", {"loader": {"persistent_workers": True}}, None)
        if "prefetch" in named:
            self.add("prefetch", {"loader": {"prefetch_factor": int(named["prefetch"] or DEFAULT_PREFETCH)}}, None)
        for name, override in (("tf32", {"tf32": True}), ("cudnn_benchmark", {"cudnn_benchmark": True}),
                               ("expandable_segments", {"env": alloc_conf_env()}),
                               ("compile", self._compile_spec())):
            if name in named and not any(p.name == name for p in self.plans):
                self.add(name, override, None)
        for kind in KINDS.values():  # the registered kinds that declare their override
            if kind.override is not None and kind.name in named and not any(p.name == kind.name for p in self.plans):
                self.add(kind.name, copy.deepcopy(dict(kind.override)), None)

    def convolutions(self) -> None:
        """cudnn.benchmark answers no finding: a bare --try runs it when the window had convolutions."""
        profile = self.session.profile
        if (self.request.auto and "cudnn_benchmark" not in self.request.named and profile is not None
                and any(CONV_KERNEL.search(k.name) for k in profile.top_kernels)):
            self.add("cudnn_benchmark", {"cudnn_benchmark": True}, None)

    def _compile_spec(self) -> dict[str, Any]:
        backend = self.request.named.get("compile")
        # CUDA graphs as well as fusion: what the launch-chain replay (scenario "launch") assumes
        return {"compile": {"backend": backend, "mode": None} if backend else
                {"backend": None, "mode": "reduce-overhead"}}


def _evidence(f: Finding, key: str) -> Any:
    item = f.evidence.get(key)
    return item.value if item is not None else None


def _predicted(finding: Finding, override: dict[str, Any]) -> float | None:
    """The finding's gain for this override: at the trial's worker count where the finding carries a worker
    curve (GD102's says what workers would do where none is advised: under 1x when they slow the step), else
    its own estimate."""
    workers = (override.get("loader") or {}).get("num_workers")
    at = finding.prediction.gain_with(int(workers)) \
        if isinstance(workers, int) and finding.prediction is not None else None
    return round(at, 2) if at is not None else finding.estimated_gain


def _loader_override(loader: LoaderInfo, workers: int, deeper: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"num_workers": workers}
    if workers > 0:
        spec["persistent_workers"] = True
        if deeper and (loader.prefetch_factor or 2) < DEEPER_PREFETCH:
            spec["prefetch_factor"] = DEEPER_PREFETCH
    if loader.dataset_class:
        spec["dataset_class"] = loader.dataset_class
    return {"loader": spec}


def plan_trials(session: Session, findings: list[Finding], request: TryRequest,
                checks: Iterable[Check] | None = None) -> tuple[list[TrialPlan], list[Untried]]:
    """The trials to run (in the findings' order) and what cannot be tried, with why. `checks`: the
    checks that judged the run, whose declarations (Check.fix) say how each remedy is tried; None:
    the installed ones."""
    planner = _Planner(session, findings, request, {c.id: c for c in checks} if checks is not None
                       else registry.checks_by_id())
    for f in findings:  # remedies named with --try-only attach to the findings they answer too
        planner.finding(f)
    planner.convolutions()
    planner.named()
    return planner.plans, planner.untried
