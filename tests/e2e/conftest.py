"""Run `gpudoctor diagnose` for real on the small workloads in tests/workloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    @property
    def report(self) -> dict[str, Any]:
        reports = [p for p in self.out.glob("*.json") if not p.name.endswith(".session.json")]
        assert len(reports) == 1, f"expected one JSON report in {self.out}: {reports}\n{self.stderr}"
        return json.loads(reports[0].read_text())

    def finding(self, check_id: str) -> dict[str, Any] | None:
        return next((f for f in self.report["findings"] if f["id"] == check_id), None)

    def outcome(self, check_id: str) -> dict[str, Any]:
        return next(c for c in self.report["checks"] if c["id"] == check_id)


@pytest.fixture
def diagnose(tmp_path):
    def run(*args: str, cwd: Path | None = None, timeout: float = 180, env: dict | None = None) -> Run:
        out = tmp_path / "reports"
        command = [sys.executable, "-m", "gpudoctor", "diagnose", "--out", f"{out}/", *args]
        full_env = dict(os.environ, **(env or {}))
        proc = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=full_env)
        return Run(proc.returncode, proc.stdout, proc.stderr, out)

    return run
