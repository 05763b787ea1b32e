"""`gpudoctor preflight` end to end: the real CLI on this machine, its exit codes, and the
policy path with a tiny CPU workload run under diagnose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # every test here starts a process

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"
needs_toml = pytest.mark.skipif(sys.version_info < (3, 11), reason="policy files need tomllib")


def preflight(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("CUDA_LAUNCH_BLOCKING", "PYTORCH_CUDA_ALLOC_CONF")}
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", "preflight", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env={**environ, **(env or {})},
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_machine_audit_writes_json_html_junit(tmp_path: Path) -> None:
    proc = preflight("--json", "pf.json", "--html", "pf.html", "--junit", "pf.xml", cwd=tmp_path)
    report = json.loads((tmp_path / "pf.json").read_text())
    failed = [i["id"] for i in report["items"] if i["status"] == "fail"]
    assert proc.returncode == (3 if failed else 0), proc.stderr
    assert report["schema"] == "gpudoctor.preflight/1" and report["job"] is None
    assert "gpudoctor preflight" in proc.stderr and proc.stdout == ""
    for item in report["items"]:
        assert item["status"] in ("pass", "warn", "fail", "not-checked")
        assert item["status"] != "not-checked" or item["reason"], item
    cases = ET.parse(tmp_path / "pf.xml").getroot().find("testsuite").findall("testcase")
    assert len(cases) == len(report["items"])
    assert "Content-Security-Policy" in (tmp_path / "pf.html").read_text()


def test_a_known_bad_setting_fails_with_exit_3_and_json_on_stdout(tmp_path: Path) -> None:
    proc = preflight("--json", "-", "--quiet", cwd=tmp_path, env={"CUDA_LAUNCH_BLOCKING": "1"})
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    item = next(i for i in report["items"] if i["id"] == "PF501")
    assert item["status"] == "fail" and item["found"] == "CUDA_LAUNCH_BLOCKING=1"
    assert proc.stderr == ""
    ignored = preflight(
        "--json", "-", "--quiet", "--ignore", "cuda-launch-blocking", cwd=tmp_path, env={"CUDA_LAUNCH_BLOCKING": "1"}
    )
    assert "PF501" not in [i["id"] for i in json.loads(ignored.stdout)["items"]]


@needs_toml
def test_a_bad_policy_is_one_line_and_exit_78(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.gpudoctor.preflight]\nmin_sm_activty = 40\n")
    proc = preflight(cwd=tmp_path)
    assert proc.returncode == 78
    assert proc.stderr.count("\n") == 1 and "unknown policy key 'min_sm_activty'" in proc.stderr


@needs_toml
def test_a_policy_demanding_a_huge_shm_fails(tmp_path: Path) -> None:
    (tmp_path / "gate.toml").write_text('min_shm_bytes = "64TiB"\n')
    proc = preflight("--policy", "gate.toml", "--json", "pf.json", cwd=tmp_path)
    report = json.loads((tmp_path / "pf.json").read_text())
    shm = next(i for i in report["items"] if i["id"] == "PF403")
    if shm["status"] == "not-checked":
        pytest.skip(f"no /dev/shm here: {shm['reason']}")
    assert proc.returncode == 3 and shm["status"] == "fail" and shm["expected"] == "at least 64.0 TiB (policy)"
    assert report["policy"] == {"source": "gate.toml", "values": {"min_shm_bytes": 64 * 2**40}}


@pytest.mark.parametrize("args, code, text", [
    (["--ignore", "PF999"], 64, "no preflight item or check"),
    (["--json", "-", "--", "true"], 64, "--json - cannot go with a command"),
    (["--", "no-such-command-xyz"], 66, "command not found"),
    (["--policy", "missing.toml"], 78, "cannot read it"),
])
def test_usage_errors(tmp_path: Path, args: list[str], code: int, text: str) -> None:
    proc = preflight(*args, cwd=tmp_path)
    assert proc.returncode == code and text in proc.stderr, proc.stderr


def test_existing_output_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "pf.json").write_text("{}")
    proc = preflight("--json", "pf.json", cwd=tmp_path)
    assert proc.returncode == 74 and (tmp_path / "pf.json").read_text() == "{}"
    assert preflight("--json", "pf.json", "--force", "--quiet", cwd=tmp_path).returncode in (0, 3)


def test_list_prints_the_catalog(tmp_path: Path) -> None:
    proc = preflight("--list", cwd=tmp_path)
    assert proc.returncode == 0 and "PF403\tshm-size\tHost\t" in proc.stdout


@needs_toml
def test_job_policy_path_with_a_tiny_cpu_workload(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.gpudoctor.preflight]\nmax_data_wait_share = 0.05\nmax_step_time_ms = 60000\n"
        "min_sm_activity = 10\nignore = [\"PF401\"]\n")
    workload = str(WORKLOADS / "loader_waiting.py")
    proc = preflight("--steps", "12", "--no-profile", "--json", "pf.json", "--junit", "pf.xml", "--html", "pf.html",
                     "--out", "job/", "--", sys.executable, workload, cwd=tmp_path, timeout=180)
    report = json.loads((tmp_path / "pf.json").read_text())
    items = {i["id"]: i for i in report["items"]}
    assert items["PF901"]["status"] == "pass", items["PF901"]
    assert (
        items["PF904"]["status"] == "fail" and items["PF904"]["expected"] == "at most 5.0% (policy max_data_wait_share)"
    )
    assert items["PF908"]["status"] == "pass"
    assert items["PF902"]["status"] == "not-checked" and items["PF902"]["reason"]  # no GPU here: not measured
    assert "PF401" not in items
    assert proc.returncode == 3, proc.stderr
    job = report["job"]
    assert job["verdict"].startswith("Input-bound") and job["stop_reason"] == "steps"
    assert any(Path(tmp_path, p).is_file() for p in job["files"].values())
    assert "<h2>Job</h2>" in (tmp_path / "pf.html").read_text()
    names = [c.get("name") for c in ET.parse(tmp_path / "pf.xml").getroot().iter("testcase")]
    assert "PF904 max-data-wait-share: The loop waits for data at most the policy's share" in names


def test_strict_fails_on_warnings_and_unchecked_items(tmp_path: Path) -> None:
    proc = preflight("--strict", "--json", "-", "--quiet", cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert report["counts"]["not-checked"] == report["counts"]["warn"] == 0
    assert proc.returncode == (3 if report["counts"]["fail"] else 0)
    noted = [i for i in report["items"] if i.get("note")]
    assert all(i["status"] == "fail" for i in noted)
