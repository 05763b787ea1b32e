"""The whole audit on a fake machine: ignore, policy escalation, a probe bug, the report contract."""

from __future__ import annotations

import datetime
import json

from preflight_helpers import idle_gpu

from gpudoctor.preflight import audit, host
from gpudoctor.preflight.items import SPECS, find
from gpudoctor.preflight.policy import Policy


def run(ctx, ignore=(), job_run=None):
    results, ignored = audit.apply_policy(audit.machine_items(ctx), ctx.policy, ignore)
    return audit.build_report(
        results, ctx, ignored=ignored, run=job_run, started=datetime.datetime(2026, 1, 2, 3, 4, 5), duration_s=1.5
    )


def test_catalog_ids_and_slugs_are_unique_and_complete() -> None:
    ids = list(SPECS)
    assert len({s.slug for s in SPECS.values()}) == len(ids)
    for spec in SPECS.values():
        assert spec.id.startswith("PF") and spec.why and spec.fix and spec.source, spec.id
    assert find("shm-size").id == "PF403" and find("pf403").id == "PF403" and find("nope") is None


def test_report_contract(make_ctx) -> None:
    report = run(make_ctx([idle_gpu(0, persistence=0)], environ={"CUDA_LAUNCH_BLOCKING": "1"}))
    assert report["schema"] == "gpudoctor.preflight/1"
    assert report["exit_code"] == 3
    assert report["verdict"].startswith("Not ready: 1 item failed (PF501 cuda-launch-blocking)")
    items = {i["id"]: i for i in report["items"]}
    machine_ids = [i for i in SPECS if not i.startswith("PF9")]
    assert list(items) == machine_ids  # every machine item, in catalog order
    assert items["PF103"]["status"] == "warn"
    for item in report["items"]:
        assert set(item) >= {
            "id",
            "slug",
            "group",
            "title",
            "status",
            "found",
            "expected",
            "reason",
            "why",
            "fix",
            "fix_code",
            "source",
            "values",
        }
        assert item["status"] != "not-checked" or item["reason"]
    assert sum(report["counts"].values()) == len(report["items"])
    assert report["host"]["gpus"][0]["bus_id"] == "0000:18:00.0"
    json.dumps(report, allow_nan=False)  # serialisable as it is


def test_ignore_by_id_or_slug_and_policy(make_ctx) -> None:
    ctx = make_ctx(environ={"CUDA_LAUNCH_BLOCKING": "1"}, policy=Policy(ignore=("PF402",)))
    report = run(ctx, ignore=["cuda-launch-blocking"])
    ids = [i["id"] for i in report["items"]]
    assert "PF501" not in ids and "PF402" not in ids
    assert report["ignored"] == [
        {"id": "PF402", "slug": "cpu-governor"},
        {"id": "PF501", "slug": "cuda-launch-blocking"},
    ]
    assert report["exit_code"] == 0


def test_policy_turns_warnings_and_unchecked_items_into_failures(make_ctx) -> None:
    ctx = make_ctx(
        [idle_gpu(0, persistence=0, pcie_gen=1)], policy=Policy(warnings_fail=("PF103",), not_checked_fails=True)
    )
    items = {i["id"]: i for i in run(ctx)["items"]}
    assert items["PF103"]["status"] == "fail" and "warnings_fail" in items["PF103"]["note"]
    assert items["PF302"]["status"] == "fail" and items["PF302"]["found"].startswith("not checked: GPU 0: Gen1 of Gen5")


def test_a_probe_that_raises_costs_only_its_item(make_ctx, monkeypatch) -> None:
    def broken(ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(host, "ITEMS", (("PF401", broken), *host.ITEMS[1:]))
    items = {i["id"]: i for i in run(make_ctx())["items"]}
    assert items["PF401"]["status"] == "not-checked" and "RuntimeError: boom" in items["PF401"]["reason"]
    assert items["PF403"]["status"] != "not-checked"


def test_docs_name_every_item_and_policy_key() -> None:
    from pathlib import Path

    from gpudoctor.preflight.policy import CONVERTERS

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "preflight.md").read_text()
    for spec in SPECS.values():
        assert f"| {spec.id} | `{spec.slug}` |" in doc, spec.id
    for key in CONVERTERS:
        assert f"`{key}`" in doc, key
    assert "| 78 | `preflight` policy" in (root / "README.md").read_text()
