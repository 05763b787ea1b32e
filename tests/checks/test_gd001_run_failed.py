"""GD001 run-failed on synthetic Sessions: what a stop, a crash and a worker's exit say."""

from __future__ import annotations

from helpers import make_cpu_samples, make_session, make_steps, run_check

from gpudoctor.checks import gd001_run_failed
from gpudoctor.model import Finding
from gpudoctor.session import ErrorEvent, ProcessInfo
from gpudoctor.verdict.build import verdict
from gpudoctor.verdict.engine import order

CHECK = gd001_run_failed.run.check  # type: ignore[attr-defined]


def _stopped_after_a_quiet_phase(tree_percent: float):
    """60 training steps of 0.1 s (until t=6 s), then 20 s without a step until --duration stops it."""
    return make_session(steps=make_steps(60, 0.1), step_source="optimizer", stop_reason="duration",
                        stop_requested_s=26.0, duration_s=26.5, exit_code=130,
                        cpu_samples=make_cpu_samples(100, interval_s=0.25, tree_percent=tree_percent,
                                                     main_percent=tree_percent))


def test_a_busy_phase_without_steps_is_not_a_hang() -> None:
    """Issue 27, item 15: imagenet's validation loop (no optimizer steps, the process busy)
    was called a stall."""
    _, findings = run_check(CHECK, _stopped_after_a_quiet_phase(tree_percent=180.0))
    assert not any("stopped making progress" in f.title for f in findings)


def test_an_idle_process_without_steps_is_a_hang() -> None:
    _, findings = run_check(CHECK, _stopped_after_a_quiet_phase(tree_percent=1.0))
    assert [f.title for f in findings] == ["The run stopped making progress: no step in the last 20s"]


def test_a_quiet_phase_without_cpu_samples_is_still_a_hang() -> None:
    session = _stopped_after_a_quiet_phase(tree_percent=1.0)
    session.cpu_samples = []
    _, findings = run_check(CHECK, session)
    assert findings and "stopped making progress" in findings[0].title


def _worker_exited(message: str):
    return make_session(steps=make_steps(30, 0.1), exit_code=1, duration_s=4.0,
                        processes=[ProcessInfo(pid=100, role="main"), ProcessInfo(pid=4242, ppid=100, role="worker")],
                        errors=[ErrorEvent(pid=100, kind="exception", type="RuntimeError", t=3.5, message=message,
                                           traceback='File "torch/utils/data/dataloader.py", line 1')])


def test_a_worker_that_exited_with_a_code_is_not_blamed_on_the_oom_killer() -> None:
    """Issue 27, item 16: a worker's os._exit(3) read "check the OOM killer"."""
    session = _worker_exited("DataLoader worker (pid 4242) exited unexpectedly with exit code 3. Details are "
                             "lost due to multiprocessing. Rerunning with num_workers=0 may give better error trace.")
    _, findings = run_check(CHECK, session)
    (finding,) = findings
    assert finding.title == "A DataLoader worker died (exited with code 3)"
    assert finding.remedy is not None
    assert "host memory" not in finding.remedy.text.lower() and "oom" not in finding.remedy.text.lower()
    assert "num_workers=0" in finding.remedy.text
    assert "no signal, so not the out-of-memory killer" in finding.message
    assert finding.evidence["worker_exit_code"].value == 3


def test_a_worker_killed_by_a_signal_still_points_at_host_memory() -> None:
    _, findings = run_check(CHECK, _worker_exited("DataLoader worker (pid 4242) is killed by signal: Killed. "))
    assert "out-of-memory killer" in findings[0].message


def test_the_crash_that_ended_the_run_leads_the_verdict() -> None:
    """Issue 27, item 16: the verdict said "Input-bound" (GD102's larger gain) and GD001 came second."""
    session = _worker_exited("DataLoader worker (pid 4242) exited unexpectedly with exit code 3.")
    _, crash = run_check(CHECK, session)
    stall = Finding("critical", "Input pipeline stall", "waits", estimated_gain=6.0, id="GD102", stage=1)
    ordered = order([stall, *crash], session, checks={})
    assert [f.id for f in ordered] == ["GD001", "GD102"]
    assert verdict(ordered, {"data_wait_share": 0.8, "measured": True}).startswith("Run failed: ")


def _import_failed(kind: str, message: str):
    return make_session(exit_code=1, duration_s=1.5, processes=[ProcessInfo(pid=100, role="main")],
                        errors=[ErrorEvent(pid=100, kind="exception", type=kind, t=1.2, message=message)])


def test_a_missing_package_other_than_torch_is_named_not_blamed_on_torch() -> None:
    """pytorch/examples' mnist on an interpreter without torchvision was told it had no working torch."""
    _, (finding,) = run_check(CHECK, _import_failed("ModuleNotFoundError", "No module named 'torchvision'"))
    assert finding.remedy is not None
    assert "cannot import torchvision" in finding.remedy.text and "install torchvision" in finding.remedy.text
    assert "no (working) torch" not in finding.remedy.text


def test_a_missing_or_broken_torch_is_still_torch() -> None:
    for kind, message in (("ModuleNotFoundError", "No module named 'torch'"),
                          ("ModuleNotFoundError", "No module named 'torch._C'"),
                          ("ImportError", "cannot import name 'FakeTensor' from 'torch.utils' (/x/torch/utils.py)")):
        _, (finding,) = run_check(CHECK, _import_failed(kind, message))
        assert finding.remedy is not None and "no (working) torch" in finding.remedy.text, message


def test_a_missing_part_of_a_package_asks_for_an_upgrade_and_pip_names_are_pips() -> None:
    remedies = {}
    for message in ("No module named 'torch.distributed.tensor'", "No module named 'torchvision.transforms.v2'",
                    "No module named 'cv2'", "No module named 'sklearn.metrics'", "No module named 'utils'"):
        _, (finding,) = run_check(CHECK, _import_failed("ModuleNotFoundError", message))
        assert finding.remedy is not None
        remedies[message.split("'")[1]] = finding.remedy.text
    assert "upgrade it" in remedies["torch.distributed.tensor"] and "no (working) torch" not in \
        remedies["torch.distributed.tensor"]
    assert "install torchvision" in remedies["torchvision.transforms.v2"]
    assert "install opencv-python" in remedies["cv2"] and "install scikit-learn" in remedies["sklearn.metrics"]
    assert "PYTHONPATH" in remedies["utils"]  # perhaps the project's own module, not a package to install


def test_an_import_error_that_names_no_module_keeps_the_generic_remedy() -> None:
    _, (finding,) = run_check(CHECK, _import_failed("ImportError", "libcudart.so.12: cannot open shared object file"))
    assert finding.remedy is not None and finding.remedy.text.startswith("Fix the exception first")


def test_lightnings_unmet_requirement_is_named_with_its_version() -> None:
    """Lightning's demo raises ModuleNotFoundError("Requirement 'requests' not met. HINT: ...")."""
    for wanted in ("requests", "torchvision>=0.16"):
        message = f"Requirement '{wanted}' not met. HINT: Try running `pip install -U '{wanted}'`"
        _, (finding,) = run_check(CHECK, _import_failed("ModuleNotFoundError", message))
        assert finding.remedy is not None and f"lacks {wanted}: install it" in finding.remedy.text


def test_a_broken_fd_hand_over_in_the_resource_sharer_is_a_worker_that_died() -> None:
    """Under load the first exception recorded when a worker is SIGKILLed can be the connection reset inside
    multiprocessing's resource sharer, which passes a batch's file descriptor: no torch/utils/data frame in it
    (a CI run read "The run crashed: ConnectionResetError")."""
    trace = ('Traceback (most recent call last):\n'
             '  File "/usr/lib/python3.11/multiprocessing/resource_sharer.py", line 145, in _serve\n'
             '    send(conn, destination_pid)\n'
             '  File "/usr/lib/python3.11/multiprocessing/connection.py", line 395, in _recv\n'
             'ConnectionResetError: [Errno 104] Connection reset by peer\n')
    processes = [ProcessInfo(pid=100, role="main"), ProcessInfo(pid=4242, ppid=100, role="worker")]
    session = make_session(steps=make_steps(30, 0.1), exit_code=1, duration_s=4.0, processes=processes,
                           errors=[ErrorEvent(pid=4242, kind="exception", type="ConnectionResetError", t=3.5,
                                              message="[Errno 104] Connection reset by peer", traceback=trace)])
    _, (finding,) = run_check(CHECK, session)
    assert finding.title.startswith("A DataLoader worker died (")
    assert finding.remedy is not None and "num_workers" in finding.remedy.text
