"""Faults gpudoctor itself meets: NVML missing, failing or losing the GPU, a profiler that
cannot start, a full or unwritable session or report directory, two runs at once,
SIGTERM to the supervisor, a full stderr. In every case the workload runs on unharmed
and exits with its own status, and what can be saved is saved."""

from __future__ import annotations

import errno
import functools
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from gpudoctor.collectors import nvml as nvml_module
from gpudoctor.run.supervisor import LaunchError, RunOptions, Supervisor

from .conftest import GPUDOCTOR, WORKLOADS, run_gpudoctor

pytestmark = pytest.mark.integration  # every test here starts a process


_spec = importlib.util.spec_from_file_location(
    "fake_pynvml", Path(__file__).resolve().parent.parent / "collectors" / "fake_pynvml.py")
assert _spec is not None and _spec.loader is not None
fake_pynvml = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("fake_pynvml", fake_pynvml)
_spec.loader.exec_module(fake_pynvml)

UUID = "GPU-00000000-aaaa-bbbb-cccc-000000000000"
SLEEPER = "import time, sys; print('workload ran', flush=True); time.sleep(%s); sys.exit(%d)"


def supervise(seconds: float = 1.0, code: int = 0, **options) -> tuple:
    """Run a small workload under the Supervisor in this process; (session, supervisor)."""
    command = [sys.executable, "-c", SLEEPER % (seconds, code)]
    supervisor = Supervisor(RunOptions(command=command, cpu_interval_s=0.1, gpu_interval_s=0.1,
                                       live_status=False, **options))
    result = supervisor.run()
    try:
        return result.session, supervisor
    finally:
        result.cleanup()


def use_fake_nvml(monkeypatch, gpus: list) -> None:
    nv = fake_pynvml.FakeNvml(gpus, clock=time.time)
    monkeypatch.setattr(nvml_module, "NvmlSampler", functools.partial(nvml_module.NvmlSampler, nvml=nv, environ={}))


def judged(session) -> dict:
    from gpudoctor.verdict.judge import judge

    report = judge(session).report
    assert not [c for c in report["checks"] if c["status"] == "error"], report["checks"]
    return report


# ---- NVML ---------------------------------------------------------------------------------
def test_nvml_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    session, _ = supervise(0.3, code=3)
    assert session.exit_code == 3
    assert session.unavailable["gpu"] == "nvidia-ml-py (pynvml) is not installed"
    assert session.gpu_samples == []
    outcome = {c["id"]: c for c in judged(session)["checks"]}["GD201"]
    assert outcome["status"] == "skipped" and "pynvml" in outcome["reason"]


def test_nvml_call_failing_costs_only_its_value(monkeypatch):
    gpu = fake_pynvml.FakeGpu(UUID, fail={"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_UNKNOWN})
    use_fake_nvml(monkeypatch, [gpu])
    session, _ = supervise(0.8)
    assert session.exit_code == 0
    assert len(session.gpu_samples) >= 3
    assert all(s.power_w is None and s.util_percent == 100.0 for s in session.gpu_samples)
    assert any("power" in note.lower() for note in session.notes), session.notes
    judged(session)


def test_gpu_vanishing_mid_run(monkeypatch):
    gpu = fake_pynvml.FakeGpu(UUID)
    use_fake_nvml(monkeypatch, [gpu])
    timer = threading.Timer(0.5, lambda: setattr(gpu, "lost", True))
    timer.start()
    try:
        session, _ = supervise(1.5, code=2)
    finally:
        timer.cancel()
    assert session.exit_code == 2
    assert 1 <= len(session.gpu_samples) <= 8  # the samples before it vanished are kept
    assert any("stopped answering" in note and "GPU is lost" in note for note in session.notes), session.notes
    judged(session)


class ExplodingSampler:
    """An NVML sampler with a bug in `where`: gpudoctor must not fall over it."""

    where = "start"

    def __init__(self, **kwargs):
        if self.where == "init":
            raise RuntimeError("sampler bug in __init__")

    def start(self, *args, **kwargs):
        if self.where == "start":
            raise RuntimeError("sampler bug in start")

    def select(self, uuids):
        raise RuntimeError("sampler bug in select")

    def latest_util(self):
        raise RuntimeError("sampler bug in latest_util")

    def stop(self):
        raise RuntimeError("sampler bug in stop")


@pytest.mark.parametrize("where", ["init", "start", "stop"])
def test_gpu_sampler_bugs_never_reach_the_run(monkeypatch, where):
    monkeypatch.setattr(ExplodingSampler, "where", where)
    monkeypatch.setattr(nvml_module, "NvmlSampler", ExplodingSampler)
    session, _ = supervise(0.3, code=4)
    assert session.exit_code == 4
    assert "sampler bug" in session.unavailable["gpu"]
    judged(session)


# ---- the profiler -------------------------------------------------------------------------
def test_profiler_failing_to_start(gd):
    run = gd("--warmup-steps", "1", str(WORKLOADS / "profiler_fails.py"), timeout=90)
    assert run.returncode == 0, run.stderr
    assert "loop done 780.0" in run.stdout  # the workload ran to its end, unharmed
    run.assert_saved()
    reasons = {c["id"]: c.get("reason") or "" for c in run.report["checks"]}
    assert "profiler failed to start" in reasons["GD301"] and "CUPTI" in reasons["GD301"], reasons
    assert run.report["summary"]["steps"] >= 19


# ---- the session directory ----------------------------------------------------------------
class _FullDisk:
    """os for the agent's writer, with a disk that is full until `.full` is cleared."""

    def __init__(self) -> None:
        self.full = True
        self.refused = 0  # writes that found the disk full

    def write(self, fd, data):
        if self.full:
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    def __getattr__(self, name):
        return getattr(os, name)


def test_agent_on_a_full_disk_keeps_the_workload_running_and_bounded(tmp_path, monkeypatch):
    from gpudoctor.agent import events

    disk = _FullDisk()
    monkeypatch.setattr(events, "os", disk)
    writer = events.EventWriter(str(tmp_path))
    writer._ensure_thread = lambda: None  # flush by hand
    flushes = 0
    for n in range(3 * events.MAX_BUFFERED):
        writer.emit("step", n=n)
        if n % 500 == 0:
            writer.flush()
            flushes += 1
    # the workload is never held up by a retry loop: a full disk costs at most one write per flush
    assert 1 <= disk.refused <= flushes
    assert writer.write_errors >= 1 and writer.dropped > 0
    assert len(writer._buffer) <= events.MAX_BUFFERED and len(writer._unwritten) <= events.MAX_UNWRITTEN_BYTES
    disk.full = False
    writer.flush(force=True)
    lines = (tmp_path / f"events-{os.getpid()}.jsonl").read_text().splitlines()
    assert lines and all(line.startswith("{") and line.endswith("}") for line in lines)
    numbers = [int(line.split('"n":')[1].split(",")[0]) for line in lines]
    assert numbers == sorted(set(numbers)), "no event written twice"


def test_agent_partial_write_is_never_duplicated(tmp_path, monkeypatch):
    from gpudoctor.agent import events

    class HalfDisk(_FullDisk):
        def write(self, fd, data):
            if self.full:
                self.full = False  # half of it fits, then the disk is full
                return os.write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")

    disk = HalfDisk()
    monkeypatch.setattr(events, "os", disk)
    writer = events.EventWriter(str(tmp_path))
    writer._ensure_thread = lambda: None
    for n in range(10):
        writer.emit("step", n=n)
    writer.flush()
    monkeypatch.setattr(events, "os", os)  # the disk has room again
    writer.flush(force=True)
    lines = (tmp_path / f"events-{os.getpid()}.jsonl").read_text().splitlines()
    assert len(lines) == 10 and len(set(lines)) == 10


def test_temporary_directory_unusable_falls_back_to_the_report_directory(tmp_path, monkeypatch):
    import tempfile

    real = tempfile.mkdtemp

    def mkdtemp(*args, dir=None, **kwargs):
        if dir is None:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr("gpudoctor.run.workdir.tempfile.mkdtemp", mkdtemp)
    session, supervisor = supervise(0.3, code=0, scratch_dirs=[str(tmp_path)])
    assert supervisor.workdir.parent == tmp_path and supervisor.workdir.name.startswith(".gpudoctor-session-")
    assert session.exit_code == 0 and session.processes, "the agent wrote its events there"
    assert not supervisor.workdir.exists(), "and the directory is removed afterwards"
    with pytest.raises(LaunchError) as raised:
        Supervisor(RunOptions(command=["true"]))
    assert raised.value.code == 73 and "session directory" in str(raised.value)


def _mount_tmpfs(where: Path, size: str = "64k") -> None:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")


@pytest.mark.skipif(os.geteuid() != 0 or not sys.platform.startswith("linux"), reason="needs root to mount a tmpfs")
@pytest.mark.parametrize("fault", ["full", "read-only mid-run"])
def test_session_directory_full_or_unwritable(tmp_path, monkeypatch, fault):
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "64k" if fault == "full" else "1m")
    timer = None
    try:
        if fault == "full":
            fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError:
                pass  # full
            finally:
                os.close(fd)
        else:
            timer = threading.Timer(0.6, subprocess.run, [["mount", "-o", "remount,ro", str(disk)]])
            timer.start()
        monkeypatch.setattr("gpudoctor.run.supervisor.make_workdir",
                            lambda fallbacks: Path(__import__("tempfile").mkdtemp(dir=disk)))
        session, _ = supervise(1.2, code=7)
        assert session.exit_code == 7  # the workload ran as if gpudoctor were not there
        assert session.cpu_samples, "the supervisor's own samples are kept"
        if fault == "full":
            assert "no Python process of the command was instrumented" in session.notes
        else:
            assert session.processes, "what was written before the disk went read-only is kept"
        judged(session)
    finally:
        if timer is not None:
            timer.cancel()
        subprocess.run(["umount", "-l", str(disk)], check=False)


# ---- the report directory ----------------------------------------------------------------
def test_report_directory_gone_at_the_end_writes_elsewhere(tmp_path):
    out = tmp_path / "reports"
    run = run_gpudoctor([str(WORKLOADS / "sabotage_report_dir.py"), str(out)], out, cwd=tmp_path)
    assert run.returncode == 5, run.stderr  # the workload's status, not 73
    assert "the reports were written to gpudoctor-reports instead" in run.stderr, run.stderr
    assert len(run.ended()) == 1 and "internal error" not in run.stderr
    saved = list((tmp_path / "gpudoctor-reports").glob("*.json"))
    assert len(saved) == 2, saved  # the report and its session
    assert out.read_text() == "not a directory any more\n"  # nothing of the user's was touched


def test_report_directory_unwritable_everywhere_still_prints_the_diagnosis(tmp_path, monkeypatch, capsys):
    from gpudoctor import pipeline
    from gpudoctor.base import exitcodes
    from gpudoctor.base.exitcodes import GpudoctorError
    from gpudoctor.verdict.output import plan_outputs

    def refuse(paths, *args, **kwargs):
        raise GpudoctorError(f"cannot write {paths.directory}: Read-only file system", exitcodes.CANNOT_WRITE)

    monkeypatch.setattr("gpudoctor.verdict.output.write_outputs", refuse)
    monkeypatch.chdir(tmp_path)
    session, _ = supervise(0.2, code=1)
    plan = plan_outputs(str(tmp_path / "out") + "/", "run", __import__("datetime").datetime.now())
    with pytest.raises(GpudoctorError) as raised:
        pipeline.finish(session, pipeline.ReportOptions(), plan)
    assert raised.value.code == exitcodes.CANNOT_WRITE
    assert "GD001" in capsys.readouterr().err  # the summary was shown before giving up


# ---- concurrency and signals ---------------------------------------------------------------
def test_two_runs_at_once_in_the_same_directory(tmp_path):
    out = tmp_path / "shared"
    # the same file stem for both: free when each run starts, taken when the second one ends
    command = [*GPUDOCTOR, "diagnose", "--quiet", "--out", f"{out}/run", str(WORKLOADS / "sys_exit.py"), "7"]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
             for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [7, 7], results
    assert sorted(os.listdir(out)) == ["run-1.html", "run-1.json", "run-1.session.json",
                                       "run.html", "run.json", "run.session.json"], results
    import json

    files = [json.loads((out / name).read_text())["files"] for name in ("run.json", "run-1.json")]
    assert files[0]["session"] == "run.session.json" and files[1]["session"] == "run-1.session.json"


def test_sigterm_to_gpudoctor_stops_the_workload_and_reports(tmp_path):
    out = tmp_path / "reports"
    proc = subprocess.Popen([*GPUDOCTOR, "diagnose", "--quiet", "--out", f"{out}/", str(WORKLOADS / "hangs.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"hanging\n"  # the workload is running
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert b"terminated (SIGTERM to gpudoctor)" in err
    import json

    [report] = [p for p in out.glob("*.json") if not p.name.endswith(".session.json")]
    data = json.loads(report.read_text())
    assert data["stop_reason"] == "terminated" and data["exit_code"] == 143


def test_full_stderr_never_costs_the_report(tmp_path):
    out = tmp_path / "reports"
    with open("/dev/full", "w") as full:
        run = run_gpudoctor([str(WORKLOADS / "sys_exit.py"), "7"], out, stderr=full)
    assert run.returncode == 7
    assert len(run.reports()) == 1 and len(list(out.glob("*.html"))) == 1


def test_closed_stderr_never_costs_the_report(tmp_path):
    out = tmp_path / "reports"
    proc = subprocess.run([*GPUDOCTOR, "diagnose", "--out", f"{out}/", str(WORKLOADS / "sys_exit.py"), "7"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=120, preexec_fn=lambda: os.close(2), check=False)
    assert proc.returncode == 7
    assert len(list(out.glob("*.html"))) == 1


def test_supervisor_notes_are_plain(tmp_path):
    """The Session of an in-process run is a valid, loadable Session (what `report` reads)."""
    from gpudoctor.session import Session

    session, _ = supervise(0.2, code=0)
    path = tmp_path / "s.session.json"
    session.save(path)
    again = Session.load(path)
    assert again.exit_code == 0 and again.processes[0].exit_handlers_ran is True
    assert SimpleNamespace  # (kept for fakes above)


# issue 27 item 2: the directory gpudoctor was started from removed during the run
@pytest.mark.parametrize("out_inside", [False, True])
def test_the_starting_directory_removed_mid_run(tmp_path, out_inside):
    work, scratch = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    shutil.copy(WORKLOADS / "removes_cwd.py", work / "removes_cwd.py")
    out = Path("reports") if out_inside else tmp_path / "out"  # relative: resolved at the start, in `work`
    proc = subprocess.run([*GPUDOCTOR, "diagnose", "--quiet", "--out", f"{out}/", "removes_cwd.py"], cwd=work,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TMPDIR=str(scratch)), check=False)
    assert proc.returncode == 0, proc.stderr  # the workload's status, not 70
    assert "internal error" not in proc.stderr
    where = work / out if out_inside else out  # where --out said when gpudoctor started
    reports = [p for p in where.glob("*.json") if not p.name.endswith(".session.json")]
    assert len(reports) == 1, proc.stderr
    # nothing but the reports themselves is made again where the workload removed its directory
    assert sorted(p.name for p in work.iterdir()) == ["reports"] if out_inside else not work.exists()
    session = json.loads(next(where.glob("*.session.json")).read_text())
    assert session["cwd"] == str(work)
    assert not list(scratch.glob("gpudoctor-session-*"))  # the temporary session directory is removed
