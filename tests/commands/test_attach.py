"""`gpudoctor attach PID`: sampling a running process from outside, or one line saying why not."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from gpudoctor import cli
from gpudoctor.base import exitcodes
from gpudoctor.commands import attach as attach_command
from gpudoctor.run import attacher

_spec = importlib.util.spec_from_file_location(
    "fake_pynvml", Path(__file__).resolve().parent.parent / "collectors" / "fake_pynvml.py")
fake_pynvml = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("fake_pynvml", fake_pynvml)
_spec.loader.exec_module(fake_pynvml)

UUID = "GPU-11111111-2222-3333-4444-555555555555"
OTHER = "GPU-99999999-2222-3333-4444-555555555555"
BUSY = "import time\nt = time.time()\nwhile time.time() - t < 60: sum(range(10000))\n"


class ProcessUtilNvml(fake_pynvml.FakeNvml):
    """The fake, plus per-process utilization samples for the GPU the target uses."""

    def __init__(self, *args, target: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.target = target

    def nvmlDeviceGetProcessUtilization(self, handle, last_seen):
        self._enter("nvmlDeviceGetProcessUtilization", handle)
        stamp = int(time.time() * 1e6)
        return [SimpleNamespace(pid=self.target, timeStamp=stamp, smUtil=12, memUtil=3)]


@pytest.fixture
def target():
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


def _run(argv: list[str], nvml=None) -> int:
    args = cli.build_parser().parse_args(["attach", *argv])
    return attach_command.run(args, nvml=nvml)


def _report(out: Path) -> dict:
    (path,) = [p for p in out.glob("*.json") if not p.name.endswith(".session.json")]
    return json.loads(path.read_text())


@pytest.mark.integration
def test_attach_samples_the_gpu_the_process_has_open(target, tmp_path):
    busy = fake_pynvml.FakeGpu(UUID, util_gpu=17, processes=[(target.pid, 3 << 30)])
    idle = fake_pynvml.FakeGpu(OTHER, util_gpu=0, processes=[(1, 1 << 30)])
    nvml = ProcessUtilNvml([idle, busy], clock=time.time, target=target.pid)
    code = _run([str(target.pid), "--duration", "2", "--interval", "0.2", "--out", str(tmp_path) + "/", "--quiet"],
                nvml=nvml)
    assert code == 0
    report = _report(tmp_path)
    assert report["source"] == "attach" and report["exit_code"] is None
    assert [g["uuid"] for g in report["environment"]["gpus"]] == [UUID]  # only the GPU it uses
    checks = {c["id"]: c for c in report["checks"]}
    for agent_check in ("GD001", "GD101", "GD102", "GD202", "GD301", "GD401", "GD402"):
        assert checks[agent_check] == {**checks[agent_check], "status": "skipped",
                                       "reason": "attach: no agent in the process"}
    assert checks["GD201"]["status"] in ("pass", "finding")
    assert checks["GD203"]["status"] != "error"
    main = next(p for p in report["evidence"]["processes"] if p["pid"] == target.pid)
    assert main["device_uuids"] == [UUID]
    notes = " ".join(report["evidence"]["notes"])
    assert "3.00 GiB" in notes and "own SM share" in notes and "mean 12%" in notes
    assert BUSY.split()[0] in " ".join(report["command"]) or report["command"][0].endswith(("python", "python3"))


@pytest.mark.integration
def test_a_process_without_a_gpu_gets_the_reason(target, tmp_path):
    nvml = fake_pynvml.FakeNvml([fake_pynvml.FakeGpu(UUID, processes=[(1, 1 << 30)])], clock=time.time)
    assert _run([str(target.pid), "--duration", "1", "--out", str(tmp_path) + "/", "--quiet"], nvml=nvml) == 0
    report = _report(tmp_path)
    gd201 = next(c for c in report["checks"] if c["id"] == "GD201")
    assert gd201["status"] == "skipped" and "the process has no GPU open" in gd201["reason"]
    assert report["summary"]["verdict"].startswith("Nothing to judge from outside")
    assert next(c for c in report["checks"] if c["id"] == "GD103")["status"] != "error"


@pytest.mark.integration
def test_a_process_that_exits_ends_the_attach_early(tmp_path, monkeypatch):
    # the target lives until its stdin closes, and that happens once the attach has begun:
    # no race between the target's end and the attach's start, however loaded the machine
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    run = attacher.Attacher.run

    def run_then_end_the_target(self):
        proc.stdin.close()
        return run(self)

    monkeypatch.setattr(attacher.Attacher, "run", run_then_end_the_target)
    assert _run([str(proc.pid), "--duration", "30", "--out", str(tmp_path) + "/", "--quiet"]) == 0
    proc.wait()
    report = _report(tmp_path)
    assert report["stop_reason"] == "exited" and any("exited" in n for n in report["evidence"]["notes"])


def test_no_such_process(capsys):
    pid = 2**22 + 12345
    while psutil.pid_exists(pid):
        pid += 1
    assert cli.main(["attach", str(pid), "--duration", "1"]) == exitcodes.NOT_FOUND
    assert capsys.readouterr().err.strip() == f"gpudoctor: error: no process with PID {pid}"


@pytest.mark.integration
def test_no_permission_is_one_line_and_77(monkeypatch, capsys, target):
    def denied(self):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "cmdline", denied)
    assert cli.main(["attach", str(target.pid)]) == exitcodes.NO_PERMISSION == 77
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"no permission to read process {target.pid}" in err[0]


def test_not_linux_is_one_line_and_69(monkeypatch, capsys):
    monkeypatch.setattr(attacher.sys, "platform", "darwin")
    assert cli.main(["attach", str(os.getppid())]) == exitcodes.NOT_RUNNABLE
    assert "attach needs Linux" in capsys.readouterr().err


def test_attaching_to_itself_is_a_usage_error():
    with pytest.raises(Exception) as caught:
        attacher.open_target(os.getpid())
    assert getattr(caught.value, "code", None) == exitcodes.USAGE


def test_documented_exit_codes_include_attach():
    documented = {code for code, _ in exitcodes.TABLE}
    assert {exitcodes.NOT_FOUND, exitcodes.NOT_RUNNABLE, exitcodes.NO_PERMISSION} <= documented
