"""Which remedies a `--try` run re-runs the workload with, from this run's findings.

One trial per distinct override: GD101, GD102 and GD103 all asking for the same
worker count share one run. A finding whose remedy needs a code change (syncs,
batch size, copies the code makes itself) is listed as untried, with why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpudoctor import metrics
from gpudoctor.analysis.input_pipeline import DEEPER_PREFETCH, worker_plan
from gpudoctor.analysis.shared import analyses
from gpudoctor.model import Finding
from gpudoctor.session import LoaderInfo, Session
from gpudoctor.trials.records import Untried
from gpudoctor.trials.remedies import DEFAULT_PREFETCH, KINDS, TryRequest, alloc_conf_env, label

# the finding whose prediction is exactly the remedy's (GD101: "with num_workers=8"; GD102
# predicts batches arriving instantly): a trial shared by several findings is checked against it
SIZED_BY = {"workers": "GD101", "pin_memory": "GD105", "tf32": "GD304", "expandable_segments": "GD401",
            "compile": "GD301"}
MEMORY_FINDINGS = ("GD401", "GD402")  # what a crashed (out-of-memory) run may still try
CONV_KERNEL = re.compile(r"conv|fprop|dgrad|wgrad|winograd|implicit_gemm|cudnn", re.IGNORECASE)

# why a finding's remedy cannot be applied from outside the code
NO_OUTSIDE_REMEDY = {
    "GD001": "the run failed: fix what stopped it first, then try remedies",
    "GD104": "storage speed belongs to the machine: stage the data on local disk or in RAM (see the finding)",
    "GD201": "an idle GPU has no switch of its own: the findings that explain it name the change",
    "GD202": "the batch size belongs to the code (memory, learning rate, convergence): measure the curve with "
             "`gpudoctor sweep`",
    "GD203": "clocks and power limits belong to the machine's administrator",
    "GD302": "the synchronising calls are in the code (their call sites are listed in the finding)",
    "GD303": "the copies are made by the code itself: stack small copies, keep data on the GPU",
}


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
    def __init__(self, session: Session, findings: list[Finding], request: TryRequest) -> None:
        self.session = session
        self.findings = findings
        self.request = request
        self.plans: list[TrialPlan] = []
        self.untried: list[Untried] = []
        self.crashed = session.exit_code not in (0, None) and session.stop_reason not in ("duration", "steps")

    def add(self, name: str, override: dict[str, Any], finding: Finding | None) -> None:
        for plan in self.plans:
            if plan.override == override:
                if finding is not None and finding.id not in plan.findings:
                    if finding.id == SIZED_BY.get(name):  # its prediction is this remedy's own
                        plan.findings.insert(0, finding.id)
                        plan.predicted_gain = finding.estimated_gain
                    else:
                        plan.findings.append(finding.id)
                        if plan.predicted_gain is None:
                            plan.predicted_gain = finding.estimated_gain
                return
        self.plans.append(TrialPlan(name, override, [finding.id] if finding else [],
                                    finding.estimated_gain if finding else None))

    def skip(self, subject: str, why: str) -> None:
        if not any(u.subject == subject for u in self.untried):
            self.untried.append(Untried(subject, why))

    def opt_in(self, finding: Finding, name: str, override: dict[str, Any]) -> None:
        if self.request.wants(name):
            self.add(name, override, finding)
        elif self.request.auto:
            self.skip(finding.id, f"its remedy ({KINDS[name].what}) changes numerics and is opt-in: "
                                  f"--try-only auto,{name}")

    # -- per finding ------------------------------------------------------------------
    def finding(self, f: Finding) -> None:
        if self.crashed and f.id not in MEMORY_FINDINGS:
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
        handler = getattr(self, "_" + f.id.lower(), None)
        if handler is not None:
            handler(f)
        elif f.id in NO_OUTSIDE_REMEDY:
            self.skip(f.id, NO_OUTSIDE_REMEDY[f.id])
        else:
            self.skip(f.id, "no remedy gpudoctor can apply from outside the code is known for this check")

    def _gd101(self, f: Finding) -> None:
        evidence = f.evidence.get("recommended_workers")
        self._workers(f, int(evidence.value) if evidence is not None and evidence.value is not None else None)

    def _gd102(self, f: Finding) -> None:
        self._workers(f, None)

    def _gd103(self, f: Finding) -> None:
        if f.title.startswith("CPU saturated"):
            self.skip(f.id, "the usable cores are full: each sample must get cheaper in the code (more workers "
                            "would compete for the same cores)")
        elif "producing batches itself" in f.title:
            self._workers(f, None)
        else:
            self.opt_in(f, "compile", self._compile_spec())

    def _in_process_note(self, f: Finding) -> bool:
        """A data finding rated a note on a loader that makes its batches in the main process."""
        loader = metrics.main_loader(self.session)
        return (self.request.auto and f.id in ("GD101", "GD102") and loader is not None
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

    def _gd105(self, f: Finding) -> None:
        unpinned = [lo for lo in self.session.loaders if lo.pin_memory is False and lo.batches > 0]
        if not unpinned:
            return self.skip(f.id, "the pageable copies come from host tensors the code makes itself (no DataLoader "
                                   "to pin): pin them once in the code and copy with non_blocking=True")
        if self.request.wants("pin_memory"):
            self.add("pin_memory", {"loader": {"pin_memory": True}}, f)

    def _gd301(self, f: Finding) -> None:
        self.opt_in(f, "compile", self._compile_spec())

    def _gd304(self, f: Finding) -> None:
        if self.request.wants("tf32"):
            self.add("tf32", {"tf32": True}, f)

    def _gd401(self, f: Finding) -> None:
        cause = next((g for g in self.findings if g.id == f.consequence_of), None)
        if cause is not None and cause.id == "GD402" and _evidence(cause, "cause") == "capacity":
            return self.skip(f.id, "consequence of GD402: the working set does not fit, whatever the allocator does")
        on = f.evidence.get("expandable_segments")
        if on is not None and on.value is True:
            return self.skip(f.id, "expandable_segments is already on: the remaining fix is in the code")
        if self.request.wants("expandable_segments"):
            self.add("expandable_segments", {"env": alloc_conf_env()}, f)

    def _gd402(self, f: Finding) -> None:
        if _evidence(f, "cause") == "capacity":
            return self.skip(f.id, "the working set does not fit: shrink it in the code (batch, autocast, "
                                   "activation checkpointing)")
        self._gd401(f)

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

    def convolutions(self) -> None:
        """cudnn.benchmark answers no finding: a bare --try runs it when the window had convolutions."""
        profile = self.session.profile
        if (self.request.auto and "cudnn_benchmark" not in self.request.named and profile is not None
                and any(CONV_KERNEL.search(k.name) for k in profile.top_kernels)):
            self.add("cudnn_benchmark", {"cudnn_benchmark": True}, None)

    def _compile_spec(self) -> dict[str, Any]:
        backend = self.request.named.get("compile")
        # CUDA graphs as well as fusion: what the launch-chain replay (GD301's prediction) assumes
        return {"compile": {"backend": backend, "mode": None} if backend else
                {"backend": None, "mode": "reduce-overhead"}}


def _evidence(f: Finding, key: str) -> Any:
    item = f.evidence.get(key)
    return item.value if item is not None else None


def _loader_override(loader: LoaderInfo, workers: int, deeper: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"num_workers": workers}
    if workers > 0:
        spec["persistent_workers"] = True
        if deeper and (loader.prefetch_factor or 2) < DEEPER_PREFETCH:
            spec["prefetch_factor"] = DEEPER_PREFETCH
    if loader.dataset_class:
        spec["dataset_class"] = loader.dataset_class
    return {"loader": spec}


def plan_trials(session: Session, findings: list[Finding], request: TryRequest) -> tuple[list[TrialPlan],
                                                                                         list[Untried]]:
    """The trials to run (in the findings' order) and what cannot be tried, with why."""
    planner = _Planner(session, findings, request)
    for f in findings:  # remedies named with --try-only attach to the findings they answer too
        planner.finding(f)
    planner.convolutions()
    planner.named()
    return planner.plans, planner.untried
