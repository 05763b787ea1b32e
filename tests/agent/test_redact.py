"""Redaction of names that look like secrets but are not (issue 27, item 14), and of the
flags that carry a key or a password (`--key X`, `-P X`)."""

from __future__ import annotations

from gpudoctor.agent.redact import MASK, env_secrets, redact_argv, redact_env, redact_text


def test_the_working_directory_is_not_a_secret() -> None:
    environ = {"PWD": "/home/alice/project", "OLDPWD": "/home/alice", "DB_PASSWORD": "hunter22x"}
    secrets = env_secrets(environ)
    assert secrets == ["hunter22x"]
    text = 'File "/home/alice/project/train.py", line 3, in <module>'
    assert redact_text(text, secrets) == text
    argv = ["python", "/home/alice/project/train.py"]
    assert redact_argv(argv, secrets) == argv
    assert redact_env(environ) == {"PWD": "/home/alice/project", "OLDPWD": "/home/alice", "DB_PASSWORD": MASK}


def test_a_pwd_flag_is_still_a_password() -> None:
    assert redact_argv(["mysql", "--pwd", "s3cretvalue"]) == ["mysql", "--pwd", MASK]


def test_key_and_capital_p_flags_are_masked() -> None:
    assert redact_argv(["python", "sign.py", "--key", "Zq0123456789abcd"]) == ["python", "sign.py", "--key", MASK]
    assert redact_argv(["sshpass", "-P", "Zqpassword1"]) == ["sshpass", "-P", MASK]
    assert "Zq0123456789abcd" not in " ".join(redact_argv(["python", "sign.py", "--key=Zq0123456789abcd"]))
    assert "Zq0123456789abcd" not in redact_text("while running: python sign.py --key Zq0123456789abcd")
    assert "Zqpassword1" not in redact_text("while running: sshpass -P Zqpassword1 ssh host")


def test_key_flags_leave_ordinary_words_alone() -> None:
    assert redact_text("KeyError: 'weight'") == "KeyError: 'weight'"
    assert redact_argv(["python", "train.py", "--keyframes", "4"]) == ["python", "train.py", "--keyframes", "4"]


def test_the_interpreters_own_capital_p_takes_no_value() -> None:
    assert redact_argv(["python3", "-P", "train.py", "-P", "Zqpassword1"]) == ["python3", "-P", "train.py", "-P", MASK]
