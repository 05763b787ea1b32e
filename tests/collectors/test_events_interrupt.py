"""The agent's record of how the workload ended on gpudoctor's own stop."""

from __future__ import annotations

import json

from gpudoctor.collectors.events import EventReader
from gpudoctor.session import Session


def write(tmp_path, pid: int, events: list[dict]) -> None:
    (tmp_path / f"events-{pid}.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")


def test_the_main_process_ending_on_our_stop_is_recorded(tmp_path):
    # on an H200 a KeyboardInterrupt landing inside the C++ autograd engine ended the process with
    # exit code 1, not 130: the agent's record tells the pipeline it was gpudoctor's stop all the same
    write(tmp_path, 7, [{"k": "hello", "ts": 1.0, "pid": 7, "ppid": 1, "argv": ["train.py"]},
                        {"k": "interrupt", "ts": 2.0, "type": "KeyboardInterrupt", "by_gpudoctor": True}])
    reader = EventReader(tmp_path, 0.0)
    session = Session()
    reader.apply(session)
    assert session.interrupted_by_gpudoctor is True


def test_a_childs_interrupt_or_a_users_ctrl_c_is_not_ours(tmp_path):
    write(tmp_path, 7, [{"k": "hello", "ts": 1.0, "pid": 7, "ppid": 1, "argv": ["train.py"]},
                        {"k": "interrupt", "ts": 2.0, "type": "KeyboardInterrupt"}])
    write(tmp_path, 8, [{"k": "hello", "ts": 1.5, "pid": 8, "ppid": 7, "argv": ["helper.py"]},
                        {"k": "interrupt", "ts": 2.0, "type": "KeyboardInterrupt", "by_gpudoctor": True}])
    reader = EventReader(tmp_path, 0.0)
    session = Session()
    reader.apply(session)
    assert session.interrupted_by_gpudoctor is None
